//! The scheduling queue's state machine (kube-scheduler's scheduling queue, for any keyed
//! item): [`SchedulingState`], its halves [`Parked`] and [`Ready`], and the
//! [`SchedulingRules`] that move items between the sub-queues. Pure: no locks, no async, no
//! clock reads; every operation that depends on time takes `now` (any [`Moment`](crate::Moment)).

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
pub use parts::{Parked, Ready};
pub use pending::{Pending, SubQueue};
pub use plugins::PluginId;
pub use rules::{Flight, Placement, Return, Returned, SchedulingRules, Wake};
pub use state::SchedulingState;
