//! The scheduling queue: kube-scheduler's queue for any keyed item (see [`SchedulingQueue`]).
//!
//! The state machine (sub-queues, attempts, gates, hints and the move rules) is
//! `ctrlq_queue_core::scheduling`; this module adds its locks, wake-ups, the timer task and
//! the handle, and re-exports the state machine's types with tokio's [`Instant`].
//!
//! [`Instant`]: tokio::time::Instant

mod builder;
mod error;
mod flush;
mod inspect;
mod moves;
mod pop;
mod popped;
mod queue;
mod state;
mod timer;
mod transfer;

pub use builder::SchedulingQueueBuilder;
pub use ctrlq_queue_core::scheduling::{
    ActionType, ClusterEvent, ConfigError, EventPayload, HintError, InFlightEntry, Pending,
    PluginId, Priority, PriorityOrder, QueueingHint, SchedulingQueueConfig, SubQueue,
};
pub use error::AlreadyQueuedError;
pub use pop::Pop;
pub use popped::Popped;
pub use queue::SchedulingQueue;

/// An item of a [`SchedulingQueue`]: the caller's key and data and the queue's bookkeeping,
/// timed by tokio's clock (see [`ctrlq_queue_core::scheduling::QueuedItem`]).
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("pod-a", 10).unwrap();
/// let mut item = queue.pop().await.expect("the queue is open");
/// assert_eq!((*item.key(), *item.data(), item.attempts()), ("pod-a", 10, 1));
/// item.set_rejectors(["NodeResourcesFit"]);
/// queue.add_unschedulable_if_not_present(item, queue.scheduling_cycle()).unwrap();
/// assert_eq!(queue.num_unschedulable(), 1);
/// # }
/// ```
pub type QueuedItem<K, T> = ctrlq_queue_core::scheduling::QueuedItem<K, T, tokio::time::Instant>;

/// A queueing hint over the queue's items (see [`ctrlq_queue_core::scheduling::HintFn`]).
pub type HintFn<K, T> = ctrlq_queue_core::scheduling::HintFn<K, T, tokio::time::Instant>;

/// A pre-enqueue gate over the queue's items (see [`ctrlq_queue_core::scheduling::GateFn`]).
pub type GateFn<K, T> = ctrlq_queue_core::scheduling::GateFn<K, T, tokio::time::Instant>;
