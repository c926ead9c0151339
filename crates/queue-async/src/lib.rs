//! Tokio-native work queues that controller workers await on, built on [`ctrlq_queue_core`]'s
//! state machines.
//!
//! [`WorkQueue`] is client-go's work queue with its delaying and rate-limiting layers in one
//! handle: `add` (and `add_all` for a burst) / `add_after` /
//! `add_rate_limited`, a cancel-safe [`get`](WorkQueue::get) future that hands out an [`Item`]
//! guard (done on drop), de-duplication, and no key in two workers at once. [`PriorityQueue`] is the same with priorities (controller-runtime's priority
//! queue), and [`parallelize_until`] runs pieces of work on a bounded number of tasks.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue = ctrlq_queue_async::WorkQueue::new();
//! queue.add("default/pod-a").unwrap();
//! let item = queue.get().await.unwrap();
//! assert_eq!(*item.key(), "default/pod-a");
//! item.done();
//! # }
//! ```
//!
//! [`SchedulingQueue`] is kube-scheduler's scheduling queue for any keyed item: pop the most
//! important item, and on failure let the queue decide between a backoff, waiting for an event
//! that could help (queueing hints, pre-enqueue gates), or going straight back.
//!
//! # Features
//!
//! - `prometheus`: the module `prometheus`, client-go's work-queue metrics registered with
//!   prometheus-client, as Kubernetes components or as controller-runtime define them.
//! - `test-util`: helpers for tests under paused time (`settle` on the work and priority queues,
//!   the module `metrics::testing`).
//!
//! # Tracing
//!
//! Each queue logs its transitions at `DEBUG` (shutdown, delays over, a worker's panic). What
//! waiting costs is traced at `TRACE` under the target `ctrlq_queue_async::wakes`, one event per
//! occurrence, named for what it counts: `wake` (a call of a queue's `Notify`), `empty_wake` (a
//! wait woken that found nothing), `park` (a wait that returns `Pending`), `hand_out` and
//! `contended_lock` (a queue's lock found held). A subscriber that counts them by name sees
//! where the CPU goes when workers meet.
//!
//! # Time
//!
//! Every queue reads tokio's clock (`tokio::time::Instant`), so `tokio::time::pause()` drives
//! delays, backoffs, priority aging and the metrics' durations alike. A call from a plain thread
//! outside any runtime is timed by the queue's runtime, not by the real clock, so a test may hand
//! work to helper threads and still see paused time.
//!
//! A queue is bound to one tokio runtime: the one it was built in, or, if it was built outside
//! any, the first one a call of it runs in. Its timer's task runs there and nowhere else.
//! Adds from a plain thread work as from a task. A queue's timers belong to its runtime, as
//! tokio's do: if that runtime shuts down while the queue lives on, nothing times the queue any
//! more, so a key waiting for its delay waits until an add of it or the queue's shutdown, a
//! scheduling queue's timed moves wait for a call that makes them, and the unfinished-work
//! gauges are no longer refreshed. Use one queue per runtime (a queue in a `static` shared by
//! several `#[tokio::test]`s is bound to the first).
//!
//! # Design
//!
//! A five-minute tour of how the work queue and the priority queue work inside; the scheduling
//! queue follows the same rules with its own sub-queues. Each queue's transitions are a pure
//! state machine: `WorkState` and `PriorityState` in `ctrlq-queue-core`, and the scheduling
//! queue's in this crate's private `scheduling::machine` module; this crate adds the locks, the
//! wake-ups and the timer. Every queue keeps its state machine under one lock; as in
//! kube-scheduler, a scheduling queue's `pop` waits while a move scans the unschedulable items.
//!
//! ## Vocabulary
//!
//! Every queue speaks client-go's verbs: `add`, `add_after`, `add_rate_limited`, `get`, `done`,
//! `forget`, `num_requeues`, `len`, `shut_down`, `shut_down_with_drain`, `is_shutting_down` (the
//! scheduling queue: `add`, `pop`, `done`, `shut_down`, `is_shutting_down`). On every queue an
//! add after shutdown is refused with [`AddError::ShutDown`], which hands the key back (every
//! key of the batch, for the work queue's `add_all`); no other add is refused, since a queue
//! takes as many keys as memory allows. A key handed out is an [`Item`] guard: `done`,
//! `forget` (success), `requeue_rate_limited` (failure), `requeue_after`, `requeue`, or
//! `into_key` (the caller then owes `done`). The queue's `done` ends only a hand-out taken out
//! with `into_key`: an item's hand-out is ended by the item alone, so a stray `done` never ends
//! another worker's hand-out of the key. Builders are named after their queue
//! ([`WorkQueueBuilder`], [`PriorityQueueBuilder`]).
//!
//! ## The state of a key
//!
//! ```text
//!  add_after / add_rate_limited               deadline
//!  ────────────────────────────▶ waiting ──────────────────┐
//!                                   │ add: the wait ends   │
//!  add ─────────────────────────────┴──────────▶ queued ◀──┘
//!                                                  │ get
//!                                                  ▼
//!  add while processing: dirty ────────────▶ processing ── done ──▶ queued if dirty, else gone
//! ```
//!
//! The pure state machines of `ctrlq-queue-core` ([`ctrlq_queue_core::WorkState`],
//! [`ctrlq_queue_core::PriorityState`]) hold the queued / processing / dirty part: a key is
//! queued at most once and never handed to two workers at once. Around one of them, a queue's
//! shared state adds the waiting keys and their deadlines, the rate limiter, the metrics recorder,
//! and the timer, under one `parking_lot` mutex that is never held across an `.await` and
//! that every add, get and done takes.
//! [`WorkQueue`] and [`PriorityQueue`] are two plain types around one private shared state, which
//! holds either queue's state machine; every add carries a priority, which the work queue's
//! machine ignores. An [`Item`] and the [`Get`](futures::Get) that hands it out hold the same state, so they
//! have no type parameter for the queue's kind.
//!
//! ## The timer
//!
//! Every deadline of a queue, of every kind, is served by one timer: one `tokio::time::Sleep`
//! at the earliest deadline, which the queue's state owns, and one background task that the
//! sleep wakes. When it wakes, the task takes what is due by the clock and sets the sleep to
//! the next deadline, so a deadline is rounded only by tokio's timer (up to its millisecond
//! tick), never by a grid of the queue's own. A change that moves the earliest deadline earlier
//! wakes the task, which resets the sleep; only the task sets it, so two changes never cross.
//! A later deadline needs no wake-up: the sleep ends early, finds nothing due, and is set
//! again. With no deadline the queue holds no sleep, and the task polls nothing in between, so
//! under paused time the clock jumps straight to the next deadline.
//!
//! In a work or priority queue, every waiting key has its exact deadline, in a keyed heap of
//! the keys ordered by their wait (deadline, then priority, then order of add). A
//! delayed add sets it directly under the queue's lock; a key that already waits keeps the
//! earlier deadline; a zero delay adds at once; an add now of a waiting key ends its wait;
//! delays beyond [`workqueue::MAX_DELAY`] are clamped. When the task wakes, it adds every key
//! whose deadline is at or before now in deadline order (then higher priority, then the order
//! of their delayed adds). A queue with metrics also has the task refresh two gauges
//! every [`UNFINISHED_WORK_UPDATE_PERIOD`](metrics::UNFINISHED_WORK_UPDATE_PERIOD), as
//! client-go does. A scheduling queue's state machine keeps its own deadlines (backoff
//! expiries, unschedulable leftovers) and tells the earliest; when it rings, the task moves
//! what is due.
//!
//! The task starts when first needed (a work or priority queue's at its first delayed add, or
//! with metrics at its first add; a scheduling queue's at its first deadline), on the queue's
//! runtime (see [Time](#time)). It holds the queue's state weakly, and ends at shutdown and
//! when the last handle is dropped.
//!
//! ## Wake-ups
//!
//! `get` is a named future, [`Get`](futures::Get), around one wait loop, which the scheduling queue's
//! [`pop`](SchedulingQueue::pop) runs too (the multi-consumer pattern of tokio's `Notify`):
//! look for a key; if none, enable a `Notified`, look again, then await it.
//! A key leaves the queue only in the `poll` that returns it, so dropping the future loses
//! nothing. Each key queued wakes one waiting `get` (`notify_one`); a `get` dropped with a
//! wake-up it did not use passes it to the next waiter, and a woken `get` that takes a key uses
//! its wake-up up, so no other `get` wakes for a key already taken. A [`WorkQueue::stream`] waits on its
//! own `Notify`, woken by every add while a stream waits, so a stream that is kept but not
//! polled holds no wake-up another consumer needs. `done` wakes one `get` when the key was
//! dirty, and wakes drains when the queue became idle.
//!
//! ## Shutdown
//!
//! `shut_down` refuses further adds, drops the waiting keys and their sleep, stops the
//! background tasks and wakes every waiting `get` and stream: `get` hands out what is still
//! queued, then returns `None`. `shut_down_with_drain` also waits until every queued key has
//! been handed out and every handed-out key is done; a plain `shut_down` cuts it short.
//!
//! ## Panics
//!
//! A worker that panics while holding an [`Item`] fails the key: the guard's drop, during the
//! unwinding, adds it back after the rate limiter's delay (then marks it done), so no key is
//! lost to a panic. After shutdown the add is refused and the key is only marked done.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod error;

/// The named futures of the queues' waits: [`Get`](futures::Get) (`WorkQueue::get`,
/// `PriorityQueue::get`) and [`Pop`](futures::Pop) (`SchedulingQueue::pop`).
pub mod futures {
    pub use crate::get::Get;
    pub use crate::scheduling::pop::Pop;
}
mod get;
mod item;
pub mod metrics;
pub mod parallelize;
pub mod priority;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
pub mod scheduling;
mod shared;
mod timer;
mod wait;
pub mod workqueue;

pub use backoff::InBackoff;
pub use error::AddError;
pub use item::Item;
pub use parallelize::{ParallelizeError, parallelize_until};
pub use priority::{PriorityQueue, PriorityQueueBuilder};
pub use scheduling::SchedulingQueue;
pub use workqueue::{WorkQueue, WorkQueueBuilder};
