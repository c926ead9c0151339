//! The scheduling queue's state machine: the sub-queues, the items' bookkeeping, the hints and
//! gates, and the rules that move items between the sub-queues. Pure: no locks, no async, no
//! clock reads; every operation that depends on time takes `now`.
//!
//! [`SchedulingState`] holds all of it; the queue keeps it under one lock.

mod active;
mod backoff;
mod config;
mod event;
mod hints;
mod item;
mod moves;
mod pending;
mod state;
mod unschedulable;

#[cfg(test)]
mod model_tests;

pub use active::InFlightEntry;
pub use config::{ConfigError, SchedulingQueueConfig};
pub use event::{ActionType, ClusterEvent, EventPayload};
pub(crate) use hints::Hooks;
pub use hints::{GateFn, HintError, HintFn, QueueingHint};
pub use item::{PluginId, Priority, PriorityOrder, QueuedItem};
pub use pending::{Pending, SubQueue};
pub(crate) use state::{Flight, SchedulingState};
