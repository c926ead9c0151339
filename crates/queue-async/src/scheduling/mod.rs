//! The scheduling queue: kube-scheduler's queue for any keyed item (see [`SchedulingQueue`]).

mod active;
mod backoff;
mod config;
mod error;
mod hints;
mod item;
mod pop;
mod queue;
mod state;
mod unschedulable;

pub use active::InFlightEntry;
pub use config::SchedulingQueueConfig;
pub use error::AlreadyQueuedError;
pub use hints::{ActionType, ClusterEvent, GateFn, HintError, HintFn, QueueingHint};
pub use item::{PluginId, Priority, PriorityOrder, QueuedItem};
pub use pop::Pop;
pub use queue::{Pending, SchedulingQueue, SchedulingQueueBuilder, SubQueue};
