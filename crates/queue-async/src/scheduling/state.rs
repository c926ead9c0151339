//! The scheduling queue's shared state: the pure state machine (`machine`), its two
//! halves each under a lock, and the wake-ups and timer task around them. Moves on events and
//! hand-backs are in `transfer`, the timed moves in `flush`, the timer in `timer`.
//!
//! # Locks
//!
//! `main` ([`Parked`]: unschedulable, move-request cycle) is taken before `hot` ([`Ready`]:
//! active, backoff, in-flight). `pop` and the backoff flush take only `hot`, and nothing holds
//! `hot` during an O(n) scan: `move_*` and the leftover flush scan under `main` and, as the
//! scan goes, insert the moved items under `hot` in chunks of 256
//! (kubernetes/kubernetes#125692). Wake-ups happen after each chunk's insertion, once `hot` is
//! released, so a woken `pop` sees the best head. Gates and hints run under `main` alone,
//! except in `activate`, which holds both.

use std::hash::Hash;
use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use super::machine::{Flight, Parked, Ready, SchedulingRules, Wake};
use ctrlq_queue_core::Compare;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;

use crate::clock::QueueClock;

use super::QueuedItem;
use super::timer::FlushTimer;

/// The state behind a [`SchedulingQueue`](super::SchedulingQueue): the state machine's rules
/// and halves under their locks, shared with the timer task.
pub(crate) struct LockedScheduling<K, T, C> {
    pub(crate) rules: SchedulingRules<K, T>,
    pub(crate) main: Mutex<Parked<K, T>>,
    pub(crate) hot: Mutex<Ready<K, T, C>>,
    /// Woken (all waiters) after an insertion `pop` could take.
    pub(crate) pop_wake: Notify,
    /// This state, for the timer task, which must not keep it alive.
    pub(super) me: Weak<Self>,
    /// The timer at the earliest deadline and the task that serves it: stopped by `close`,
    /// and with this state when the last handle drops. The innermost lock: nothing else is
    /// taken while it is held.
    pub(super) timer: Mutex<FlushTimer>,
    /// Timestamps come from here: the caller's runtime clock, or the queue's from a plain thread.
    pub(crate) clock: QueueClock,
    /// The scheduling cycle, copied from `hot` by every pop, for readers that take no lock.
    pub(crate) cycle: AtomicU64,
}

/// The crate's lock (parking_lot: no poisoning, so a panicking hint or gate cannot wedge the
/// queue; the state is consistent between transitions, which is all a panic can leave).
pub(crate) fn lock<G>(m: &Mutex<G>) -> MutexGuard<'_, G> {
    crate::count::lock(m)
}

impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// A state with `rules` (their settings already validated), the active sub-queue in
    /// `order`.
    pub(crate) fn new(rules: SchedulingRules<K, T>, order: C, me: Weak<Self>) -> Self {
        LockedScheduling {
            rules,
            main: Mutex::new(Parked::new()),
            hot: Mutex::new(Ready::new(order)),
            pop_wake: Notify::new(),
            me,
            timer: Mutex::new(FlushTimer::new()),
            clock: QueueClock::new(),
            cycle: AtomicU64::new(0),
        }
    }

    /// One pop attempt: `None` if nothing to pop, `Some(None)` once closed.
    pub(crate) fn try_pop(&self) -> Option<Option<Flight<K, T>>> {
        let mut hot = lock(&self.hot);
        if hot.is_closed() {
            return Some(None);
        }
        let flight = self.rules.pop(&mut hot, || self.clock.now())?;
        // Only pops write the cycle, under `hot`: a plain store, no read-modify-write.
        self.cycle.store(flight.cycle, AtomicOrdering::Release);
        crate::count::hand_out();
        Some(Some(flight))
    }

    /// Ends `flight` of `key`, if it is still the key's current flight.
    pub(crate) fn end_flight(&self, key: &K, flight: u64) {
        lock(&self.hot).end_flight(key, flight);
    }

    pub(crate) fn shut_down(&self) {
        lock(&self.hot).close();
        lock(&self.timer).close();
        crate::count::wake();
        self.pop_wake.notify_waiters();
    }
}

/// The operations that may start the timer task, which needs the bounds of a spawned task.
impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    pub(crate) fn wake(&self, wake: Wake) {
        if wake.pop {
            crate::count::wake();
            self.pop_wake.notify_waiters();
        }
        if wake.timer || wake.flush {
            self.poke_timer(wake.timer, wake.flush);
        }
    }
}
