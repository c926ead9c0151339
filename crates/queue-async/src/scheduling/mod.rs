//! The scheduling queue: kube-scheduler's queue for any keyed item (see [`SchedulingQueue`]).

mod active;
mod backoff;
mod builder;
mod config;
mod error;
mod event;
mod flush;
mod hints;
mod inspect;
mod item;
mod moves;
mod pending;
mod pop;
mod popped;
mod queue;
mod state;
mod transfer;
mod unschedulable;

pub use active::InFlightEntry;
pub use builder::SchedulingQueueBuilder;
pub use config::{ConfigError, SchedulingQueueConfig};
pub use error::AlreadyQueuedError;
pub use event::{ActionType, ClusterEvent, EventPayload};
pub use hints::{GateFn, HintError, HintFn, QueueingHint};
pub use item::{PluginId, Priority, PriorityOrder, QueuedItem};
pub use pending::{Pending, SubQueue};
pub use pop::Pop;
pub use popped::Popped;
pub use queue::SchedulingQueue;
