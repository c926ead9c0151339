//! The shared state behind every handle, and the transitions that place, take and pop one
//! item; moves on events and hand-backs are in `transfer`, the timed moves in `flush`.
//!
//! # Invariants
//!
//! 1. Every queued key is in exactly one of active, backoff and unschedulable (DESIGN.md, 3).
//!    A key may additionally be in flight (popped, not yet done).
//! 2. An item inside a heap is never mutated in a way that changes its order, except through
//!    `KeyedHeap::update`, which re-sifts it (kubernetes/kubernetes#97302).
//!
//! # Locks
//!
//! `main` (unschedulable map, move-request cycle) is taken before `hot` (active, backoff,
//! in-flight). `pop` and the backoff flush take only `hot`, and nothing holds `hot` during an
//! O(n) scan: `move_*` and the leftover flush scan under `main` and, as the scan goes, insert
//! the moved items under `hot` in chunks of 256 (kubernetes/kubernetes#125692). Wake-ups happen
//! after each chunk's insertion, once `hot` is released, so a woken `pop` sees the best head.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};

use ctrlq_queue_core::Compare;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use crate::clock::QueueClock;
use crate::task::BackgroundTask;

use super::active::ActiveQueue;
use super::backoff::{self, BackoffQueue};
use super::config::SchedulingQueueConfig;
use super::hints::{Hooks, Strategy};
use super::item::QueuedItem;
use super::unschedulable::Unschedulable;

/// The state behind a [`SchedulingQueue`](super::SchedulingQueue): its sub-queues, hooks and
/// locks, shared with the flush task.
pub(crate) struct SchedulingState<K, T, C> {
    pub(crate) config: SchedulingQueueConfig,
    pub(crate) hooks: Hooks<K, T>,
    pub(crate) main: Mutex<Main<K, T>>,
    pub(crate) hot: Mutex<Hot<K, T, C>>,
    /// Woken (all waiters) after an insertion `pop` could take.
    pub(crate) pop_wake: Notify,
    /// Woken when the backoff head or the next leftover deadline got earlier, so the flush
    /// timer re-arms.
    pub(super) timer_wake: Arc<Notify>,
    /// This state, for the flush loop, which must not keep it alive.
    pub(super) me: Weak<Self>,
    /// The flush loop: stopped by `close`, and with this state when the last handle drops.
    pub(super) flush_task: Mutex<BackgroundTask>,
    /// Timestamps come from here: the caller's runtime clock, or the queue's from a plain thread.
    pub(crate) clock: QueueClock,
    /// The scheduling cycle; incremented under `hot` by every pop.
    pub(crate) cycle: AtomicU64,
    seq: AtomicU64,
}

/// Guarded by `SchedulingState::main`.
#[derive(Debug)]
pub(crate) struct Main<K, T> {
    pub(crate) unschedulable: Unschedulable<K, T>,
    /// The cycle of the last move request (event or activation); decides where an item that
    /// was not tracked in flight goes on failure.
    pub(crate) move_request_cycle: Option<u64>,
    /// When the leftover flush must next look at unschedulable: at or before the earliest
    /// [`leftover_deadline`](SchedulingState::leftover_deadline) of the items there, `None` if nothing
    /// there is due ever. It may be early (the item left, or its gates were asked again since):
    /// that costs one scan that moves nothing. It is never late, so no item waits past its
    /// deadline, and the flush loop needs no periodic sweep.
    pub(crate) next_leftover: Option<Instant>,
}

/// Guarded by `SchedulingState::hot`.
#[derive(Debug)]
pub(crate) struct Hot<K, T, C> {
    pub(crate) active: ActiveQueue<K, T, C>,
    pub(crate) backoff: BackoffQueue<K, T, C>,
    pub(crate) closed: bool,
}

/// Where an item goes once its strategy and gates are known.
pub(crate) enum Dest<K, T> {
    Active(QueuedItem<K, T>),
    /// With the moment its backoff ends.
    Backoff(QueuedItem<K, T>, Instant),
    Unschedulable(QueuedItem<K, T>),
}

/// A popped item, its flight id and the scheduling cycle it was popped in.
pub(crate) type Flight<K, T> = (QueuedItem<K, T>, u64, u64);

/// What to wake after the locks are released.
#[derive(Default)]
pub(crate) struct Wake {
    pop: bool,
    timer: bool,
    /// An item went where only the flush loop takes it out (backoff, unschedulable).
    flush: bool,
}

/// The crate's lock (parking_lot: no poisoning, so a panicking hint or gate cannot wedge the
/// queue; the state is consistent between transitions, which is all a panic can leave).
pub(crate) fn lock<G>(m: &Mutex<G>) -> MutexGuard<'_, G> {
    m.lock()
}

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    pub(crate) fn new(
        config: SchedulingQueueConfig,
        hooks: Hooks<K, T>,
        order: C,
        me: Weak<Self>,
    ) -> Self {
        let order = Arc::new(order);
        SchedulingState {
            config,
            hooks,
            main: Mutex::new(Main {
                unschedulable: Unschedulable::new(),
                move_request_cycle: None,
                next_leftover: None,
            }),
            hot: Mutex::new(Hot {
                active: ActiveQueue::new(order.clone()),
                backoff: BackoffQueue::new(order),
                closed: false,
            }),
            pop_wake: Notify::new(),
            timer_wake: Arc::new(Notify::new()),
            me,
            flush_task: Mutex::new(BackgroundTask::default()),
            clock: QueueClock::new(),
            cycle: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, AtomicOrdering::Relaxed)
    }

    /// Runs the gates (if asked) and the backoff check: where `item` goes under `strategy`.
    pub(crate) fn prepare(
        &self,
        mut item: QueuedItem<K, T>,
        strategy: Strategy,
        now: Instant,
        run_gates: bool,
    ) -> Dest<K, T> {
        if strategy == Strategy::Skip || (run_gates && self.gate_in_place(&mut item)) {
            return Dest::Unschedulable(item);
        }
        self.place(item, strategy, now)
    }

    /// Asks the gates about `item` and records the answer in it; true if a gate refused.
    pub(super) fn gate_in_place(&self, item: &mut QueuedItem<K, T>) -> bool {
        match self.hooks.gate(item) {
            Some(plugin) => {
                let inner = item.inner_mut();
                inner.gating = Some(plugin);
                inner.rejectors.push(plugin);
                true
            }
            None => {
                if item.is_gated() {
                    item.inner_mut().gating = None;
                }
                false
            }
        }
    }

    /// Where an item let in under `strategy` (not `Skip`) goes: backoff while its backoff
    /// lasts, active otherwise.
    pub(super) fn place(
        &self,
        item: QueuedItem<K, T>,
        strategy: Strategy,
        now: Instant,
    ) -> Dest<K, T> {
        if strategy == Strategy::AfterBackoff {
            let wait = self.config.backoff_duration(item.backoff_count());
            let expiry = backoff::expiry(item.timestamp, wait);
            if expiry > now {
                return Dest::Backoff(item, expiry);
            }
        }
        Dest::Active(item)
    }

    /// Inserts a prepared item; unschedulable ones go to `main`.
    pub(crate) fn commit(
        &self,
        main: &mut Main<K, T>,
        hot: &mut Hot<K, T, C>,
        dest: Dest<K, T>,
        now: Instant,
        wake: &mut Wake,
    ) {
        match dest {
            Dest::Unschedulable(item) => {
                if let Some(due) = self.leftover_deadline(&item)
                    && main.next_leftover.is_none_or(|next| due < next)
                {
                    main.next_leftover = Some(due);
                    wake.timer = true;
                }
                main.unschedulable.insert(item);
                wake.flush = true;
            }
            other => self.commit_hot(hot, other, now, wake),
        }
    }

    pub(super) fn commit_hot(
        &self,
        hot: &mut Hot<K, T, C>,
        dest: Dest<K, T>,
        now: Instant,
        wake: &mut Wake,
    ) {
        match dest {
            Dest::Active(item) => {
                hot.active.push(item, now);
                wake.pop = true;
            }
            Dest::Backoff(item, expiry) => {
                wake.timer |= hot.backoff.push(item, expiry);
                wake.pop |= self.config.pop_from_backoff;
                wake.flush = true;
            }
            Dest::Unschedulable(_) => unreachable!("unschedulable items are committed under main"),
        }
    }

    /// Removes `key` from whichever sub-queue holds it.
    pub(crate) fn take(
        &self,
        main: &mut Main<K, T>,
        hot: &mut Hot<K, T, C>,
        key: &K,
    ) -> Option<QueuedItem<K, T>> {
        if let Some((_, item)) = hot.active.heap.delete(key) {
            return Some(item);
        }
        if let Some(item) = hot.backoff.delete(key) {
            return Some(item);
        }
        main.unschedulable.remove(key)
    }

    /// One pop attempt: `None` if nothing to pop, `Some(None)` once closed; an item comes with
    /// its flight id and the scheduling cycle it was popped in.
    pub(crate) fn try_pop(&self) -> Option<Option<Flight<K, T>>> {
        let mut hot = lock(&self.hot);
        loop {
            if hot.closed {
                return Some(None);
            }
            let (key, mut item) = match hot.active.heap.pop() {
                Some(entry) => entry,
                None if self.config.pop_from_backoff => {
                    let (key, mut item) = hot.backoff.pop_rejected()?;
                    item.enter_active(self.clock.now());
                    (key, item)
                }
                None => return None,
            };
            // The heap's copy of the key moves into the in-flight record: no clone, no drop.
            let Some(flight) = hot.active.in_flight.start(key) else {
                // kubernetes/kubernetes#118226: a second marker would leak the first.
                debug!("discarding a duplicate of an item in flight");
                continue;
            };
            item.attempts = item.attempts.saturating_add(1);
            // Only pops write the cycle, under `hot`: a plain store, no read-modify-write.
            let cycle = self.cycle.load(AtomicOrdering::Relaxed) + 1;
            self.cycle.store(cycle, AtomicOrdering::Release);
            return Some(Some((item, flight, cycle)));
        }
    }

    /// Ends `flight` of `key`, if it is still the key's current flight.
    pub(crate) fn end_flight(&self, key: &K, flight: u64) {
        let mut hot = lock(&self.hot);
        if hot.active.in_flight.is_current(key, flight) {
            hot.active.in_flight.done(key);
        }
    }

    pub(crate) fn shut_down(&self) {
        let mut hot = lock(&self.hot);
        hot.closed = true;
        hot.active.in_flight.clear();
        drop(hot);
        lock(&self.flush_task).stop();
        self.pop_wake.notify_waiters();
    }
}

/// The operations that may start the flush loop, which needs the bounds of a spawned task.
impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    pub(crate) fn wake(&self, wake: Wake) {
        if wake.pop {
            self.pop_wake.notify_waiters();
        }
        if wake.timer {
            self.timer_wake.notify_one();
        }
        if wake.flush {
            self.ensure_flush_task();
        }
    }
}
