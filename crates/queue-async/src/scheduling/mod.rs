//! The scheduling queue: kube-scheduler's queue for any keyed item (see [`SchedulingQueue`]).
//!
//! The pure state machine (sub-queues, attempts, gates, hints and the move rules) is the
//! private `machine` module: no locks, no async, no clock reads, every operation that depends on
//! time takes `now` (a `tokio::time::Instant`). The rest of this module adds its one lock,
//! wake-ups, the timer task (`shared`) and the handle.

mod builder;
mod error;
mod machine;
pub(crate) mod pop;
mod popped;
mod queue;
mod shared;

pub use builder::SchedulingQueueBuilder;
pub use error::AlreadyQueuedError;
pub use machine::{
    ActionType, ClusterEvent, ConfigError, EventPayload, GateFn, HintError, HintFn, InFlightEntry,
    Pending, PluginId, Priority, PriorityOrder, QueuedItem, QueueingHint, SchedulingQueueConfig,
    SubQueue,
};
pub use popped::Popped;
pub use queue::SchedulingQueue;
