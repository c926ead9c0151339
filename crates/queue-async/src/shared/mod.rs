//! What the work queue and the priority queue share: [`Shared`], the state behind a handle.
//!
//! Locks (parking_lot, never held across an `.await`):
//!
//! - `state` guards the state machine and the metrics recorder: every add, get and done takes
//!   it;
//! - `timers` guards the waiting keys, their timers (`delay::Timers`) and the delay
//!   task: delayed adds and the delay task take it.
//!
//! A delayed add sets its timer without holding `state`, and the delay task takes the due keys
//! under `timers` alone, then adds them under `state`. When both are held, `state` is taken
//! first. Three
//! `Notify`s carry the wake-ups: `get_wake` (one waiting `get` per queued key), `stream_wake`
//! (every waiting stream) and `idle_wake` (drains). The protocol is in the crate's design docs.
//!
//! One file per role: `machine` (the enum over the two state machines: every rule in which
//! the work and the priority queue differ); `state` ([`Shared`], its locks and queries);
//! `add` (the locked step every add ends in); `delay` (the delayed adds, the waiting keys and
//! the delay task); `handout` (gets, dones and a panic's requeue); `metrics_task` (the gauge
//! refresh); `shutdown` and `stream`.

mod add;
mod delay;
mod handout;
mod machine;
mod metrics_task;
mod shutdown;
mod state;
mod stream;

pub(crate) use self::machine::Machine;
pub(crate) use self::state::{Options, Shared};
pub(crate) use self::stream::StreamWait;
