//! The scheduling queue's state machine: the sub-queues, the items' bookkeeping, the hints and
//! gates, and the rules that move items between the sub-queues. Pure: no locks, no async, no
//! clock reads; every operation that depends on time takes `now`.
//!
//! The state is in two halves, [`Parked`] (unschedulable items and the move bookkeeping) and
//! [`Ready`] (active, backoff and the in-flight record), so that the queue can guard each with
//! its own lock and a pop never waits behind a scan of unschedulable items. [`SchedulingRules`]
//! holds the settings, hints and gates, and every transition, each over the half it touches.

mod active;
mod backoff;
mod config;
mod event;
mod hints;
mod item;
mod moves;
mod parts;
mod pending;
mod plugins;
mod rules;
#[cfg(test)]
mod state;
mod transitions;
mod unschedulable;

#[cfg(test)]
mod model_tests;

pub use active::InFlightEntry;
pub use config::{ConfigError, SchedulingQueueConfig};
pub use event::{ActionType, ClusterEvent, EventPayload};
pub use hints::{GateFn, HintError, HintFn, QueueingHint};
pub use item::{Priority, PriorityOrder, QueuedItem};
pub(crate) use parts::{Parked, Ready};
pub use pending::{Pending, SubQueue};
pub use plugins::PluginId;
pub(crate) use rules::{Flight, Placement, Return, SchedulingRules, Wake};
#[cfg(test)]
pub(crate) use state::SchedulingState;
