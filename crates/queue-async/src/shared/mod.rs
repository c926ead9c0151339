//! What the work queue and the priority queue share: [`Shared`], the state behind a handle.
//!
//! Locks (parking_lot, never held across an `.await`):
//!
//! - `state` guards the state machine and the metrics recorder: every add, get and done takes
//!   it;
//! - `timers` guards the waiting keys, their timers ([`Timers`](timers::Timers)) and the delay
//!   task: delayed adds and the delay task take it.
//!
//! A delayed add sets its timer without holding `state`, and the delay task takes the due keys
//! under `timers` alone, then adds them under `state`. When both are held, `state` is taken
//! first. Three
//! `Notify`s carry the wake-ups: `get_wake` (one waiting `get` per queued key), `stream_wake`
//! (every waiting stream) and `idle_wake` (drains). The protocol is in the crate's design docs.
//!
//! One file per role, each using only those listed before it: `machine` (the two state
//! machines under one trait) and `timers` (the waiting keys) know nothing of the handle;
//! `state` holds [`Shared`] and its locks; `metrics_task` the gauge refresh; `add` the
//! locked step every add ends in; `delay` the delayed adds and the delay task; `handout` the
//! gets, the dones and a panic's requeue; `shutdown` and `stream`.

mod add;
mod delay;
mod handout;
mod machine;
mod metrics_task;
mod shutdown;
mod state;
mod stream;
mod timers;

pub(crate) use self::machine::{Payload, QueueKey};
pub(crate) use self::state::{Options, Shared};
pub(crate) use self::stream::StreamWait;
