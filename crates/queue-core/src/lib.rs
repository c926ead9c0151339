//! Pure data structures behind the queues: no async, no spawning, no clock reads.
//!
//! - [`KeyedHeap`]: a 4-ary heap addressable by key, ordered by a [`Compare`] of the caller's.
//!   The scheduling queue's active and backoff sub-queues are keyed heaps.
//! - [`WorkState`]: the state machine of a de-duplicating work queue (FIFO, dirty and
//!   processing sets). `queue-async`'s work queue wraps it with a lock and wake-ups.
//! - [`PriorityState`]: the state machine of a priority work queue.
//! - [`AddOutcome`], [`PopOutcome`] and [`DoneOutcome`]: what a transition of either state
//!   machine did, one vocabulary for both.
//!
//! The scheduling queue's state machine is not here: its only user is `queue-async`'s
//! scheduling queue, so it lives there as a private module, as pure as the machines here.
//!
//! Everything that depends on time takes it as an argument, which keeps this crate
//! deterministic and testable to the last branch.
//!
//! # Examples
//!
//! ```
//! use ctrlq_queue_core::{AddOutcome, KeyedHeap, PopOutcome, WorkState};
//!
//! let mut heap = KeyedHeap::default();
//! heap.add("b", 2);
//! heap.add("a", 1);
//! assert_eq!(heap.pop(), Some(("a", 1)));
//!
//! let mut work = WorkState::new();
//! assert_eq!(work.add("a"), AddOutcome::Queued);
//! assert_eq!(work.pop(), PopOutcome::Item("a"));
//! ```

mod compare;
pub mod keyed_heap;
mod outcome;
mod priority_state;
mod work_state;

#[cfg(test)]
mod model_tests;

pub use compare::{Compare, MaxOrder, MinOrder};
pub use keyed_heap::KeyedHeap;
pub use outcome::{AddOutcome, DoneOutcome, PopOutcome};
pub use priority_state::PriorityState;
pub use work_state::WorkState;
