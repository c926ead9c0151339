//! Wake accounting: process-wide counts of what the queues' waiting consumers (`get`, a work
//! queue's stream, a scheduling queue's `pop`) cost, to see where the CPU goes when workers
//! meet.
//!
//! Five relaxed atomic counters, summed over every queue of the process:
//!
//! - [`wakes`](WakeCounts::wakes): wake-ups sent to waiting consumers, one per call of the
//!   queue's `Notify` (a work or priority queue: one `notify_one` per key queued for the `get`s,
//!   one `notify_waiters` for the streams, one of each at shutdown; a scheduling queue: one
//!   `notify_waiters` per change that lets a `pop` take an item where none could be taken
//!   before);
//! - [`empty_wakes`](WakeCounts::empty_wakes): waits that were woken and then found nothing to
//!   take, so waited again;
//! - [`parks`](WakeCounts::parks): times a wait returned `Pending`, its wake-up registered;
//! - [`hand_outs`](WakeCounts::hand_outs): keys handed out (by a `get`, a stream, a `pop` or a
//!   `try_pop`);
//! - [`contended_locks`](WakeCounts::contended_locks): acquisitions of a queue's lock that found
//!   it held and had to wait.
//!
//! Divide by [`hand_outs`](WakeCounts::hand_outs) for the cost per item. Only with the
//! `wake-counts` feature: without it none of these counters exists and the queues compile to
//! the same code as without any counting.
//!
//! ```
//! use ctrlq_queue_async::{WorkQueue, wake_counts};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! wake_counts::reset();
//! let queue = WorkQueue::new();
//! queue.add("default/pod-a").unwrap();
//! queue.get().await.unwrap().done();
//! let counts = wake_counts::snapshot();
//! // Counters are process-wide: other queues in the process count too.
//! assert!(counts.hand_outs >= 1);
//! println!("{:.2} parks per item", counts.parks as f64 / counts.hand_outs as f64);
//! # }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) static WAKES: AtomicU64 = AtomicU64::new(0);
pub(crate) static EMPTY_WAKES: AtomicU64 = AtomicU64::new(0);
pub(crate) static PARKS: AtomicU64 = AtomicU64::new(0);
pub(crate) static HAND_OUTS: AtomicU64 = AtomicU64::new(0);
pub(crate) static CONTENDED_LOCKS: AtomicU64 = AtomicU64::new(0);

/// The counts at one moment (see the [module docs](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WakeCounts {
    /// Wake-ups sent to waiting `get`s and streams, one per `Notify` call.
    pub wakes: u64,
    /// Waits woken that found nothing to take.
    pub empty_wakes: u64,
    /// Waits that returned `Pending` with their wake-up registered.
    pub parks: u64,
    /// Keys handed out.
    pub hand_outs: u64,
    /// Lock acquisitions that found the lock held.
    pub contended_locks: u64,
}

/// Reads the counters (each relaxed: a snapshot taken while queues run is not one instant).
pub fn snapshot() -> WakeCounts {
    WakeCounts {
        wakes: WAKES.load(Ordering::Relaxed),
        empty_wakes: EMPTY_WAKES.load(Ordering::Relaxed),
        parks: PARKS.load(Ordering::Relaxed),
        hand_outs: HAND_OUTS.load(Ordering::Relaxed),
        contended_locks: CONTENDED_LOCKS.load(Ordering::Relaxed),
    }
}

/// Sets every counter to zero.
pub fn reset() {
    for counter in [&WAKES, &EMPTY_WAKES, &PARKS, &HAND_OUTS, &CONTENDED_LOCKS] {
        counter.store(0, Ordering::Relaxed);
    }
}

// ===== the counting points, called by the queues only with this feature =====

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A wake-up sent to waiting `get`s, streams or pops (one `Notify` call).
pub(crate) fn wake() {
    bump(&WAKES);
}

/// A wait was woken and found nothing.
pub(crate) fn empty_wake() {
    bump(&EMPTY_WAKES);
}

/// A wait returned `Pending` with its wake-up registered.
pub(crate) fn park() {
    bump(&PARKS);
}

/// A key handed out.
pub(crate) fn hand_out() {
    bump(&HAND_OUTS);
}

/// An acquisition of a queue's lock found it held (the lock is tried first).
pub(crate) fn contended_lock() {
    bump(&CONTENDED_LOCKS);
}
