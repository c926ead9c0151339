//! The shared state behind every handle, and the transitions between sub-queues.
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

use std::cell::Cell;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ctrlq_queue_core::Compare;
use futures::future::{self, Either};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{Instrument, debug, trace};

use crate::clock::QueueClock;
use crate::task::BackgroundTask;

use super::active::ActiveQueue;
use super::active::RecordedEvent;
use super::backoff::{self, BackoffQueue};
use super::config::SchedulingQueueConfig;
use super::error::AlreadyQueuedError;
use super::hints::{ClusterEvent, EventPayload, Hooks, Strategy};
use super::item::QueuedItem;
use super::unschedulable::Unschedulable;

/// How many moved items are inserted per hold of the hot lock, so `pop` never waits long.
const CHUNK: usize = 256;

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
    timer_wake: Arc<Notify>,
    /// This state, for the flush loop, which must not keep it alive.
    me: Weak<Self>,
    /// The flush loop: stopped by `close`, and with this state when the last handle drops.
    flush_task: Mutex<BackgroundTask>,
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

/// Commits moved items to the hot sub-queues in chunks, waking pops after each; on drop
/// (also when a hint panics mid-scan) it commits what it holds, so no picked item is lost.
struct Mover<'a, K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    shared: &'a SchedulingState<K, T, C>,
    event: &'a ClusterEvent,
    payload: &'a EventPayload,
    now: Instant,
    pending: Vec<Dest<K, T>>,
    /// The unschedulable items before the scan, to estimate how many will move.
    candidates: usize,
    moved: usize,
    /// Whether the event has been recorded for the items in flight (at the first commit).
    recorded: bool,
}

impl<K, T, C> Mover<'_, K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    fn push(&mut self, dest: Dest<K, T>, scanned: usize) {
        self.pending.push(dest);
        if self.pending.len() == CHUNK {
            self.commit(Some(scanned));
        }
    }

    /// Commits the pending items. At the first full chunk, `scanned` (how many candidates the
    /// scan has seen) extrapolates how many will move, and the heaps reserve room for them.
    fn commit(&mut self, scanned: Option<usize>) {
        let mut wake = Wake::default();
        let mut hot = lock(&self.shared.hot);
        if !self.recorded {
            self.recorded = true;
            hot.active
                .in_flight
                .record(*self.event, self.payload.clone(), None);
            if let Some(scanned) = scanned.filter(|s| *s > 0) {
                let rest = self.candidates.saturating_sub(scanned) * self.pending.len() / scanned;
                let to_backoff = self
                    .pending
                    .iter()
                    .filter(|d| matches!(d, Dest::Backoff(..)))
                    .count();
                let to_active = self.pending.len() - to_backoff;
                hot.active.reserve(rest * to_active / self.pending.len());
                hot.backoff.reserve(rest * to_backoff / self.pending.len());
            }
        }
        self.moved += self.pending.len();
        for dest in self.pending.drain(..) {
            self.shared.commit_hot(&mut hot, dest, self.now, &mut wake);
        }
        drop(hot);
        self.shared.wake(wake);
    }

    /// Commits the rest (and records the event if nothing moved); how many items moved.
    fn finish(mut self) -> usize {
        self.commit(None);
        self.moved
    }
}

impl<K, T, C> Drop for Mover<'_, K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.commit(None);
        }
    }
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
    fn gate_in_place(&self, item: &mut QueuedItem<K, T>) -> bool {
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
    fn place(&self, item: QueuedItem<K, T>, strategy: Strategy, now: Instant) -> Dest<K, T> {
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

    fn commit_hot(&self, hot: &mut Hot<K, T, C>, dest: Dest<K, T>, now: Instant, wake: &mut Wake) {
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

    pub(crate) fn flush_backoff_completed(&self, now: Instant) -> usize {
        let mut hot = lock(&self.hot);
        let mut count = 0;
        while let Some(item) = hot.backoff.pop_completed(now) {
            hot.active.push(item, now);
            count += 1;
        }
        drop(hot);
        if count > 0 {
            trace!(count, "backoff completed");
            self.pop_wake.notify_waiters();
        }
        count
    }

    /// When the leftover flush takes `item`: the first instant at which it has been waiting
    /// strictly longer than the maximum, counted from its entry into unschedulable or, for a
    /// gated item, from the last time the flush asked its gates. `None` if that is beyond what
    /// an `Instant` holds: never.
    ///
    /// The strict rule is kube-scheduler's (`flushUnschedulablePodsLeftover`); as an instant it
    /// is 1 ns past `since + max`, so the timer and the check agree on one value.
    pub(crate) fn leftover_deadline(&self, item: &QueuedItem<K, T>) -> Option<Instant> {
        let info = item.info();
        let since = match info.gating {
            Some(_) => info.flushed_at.unwrap_or(item.timestamp),
            None => item.timestamp,
        };
        since
            .checked_add(self.config.max_in_unschedulable)?
            .checked_add(Duration::from_nanos(1))
    }

    /// The flush loop's next wake-up: the earlier of the backoff head's expiry and the next
    /// leftover deadline; `None` when neither exists (then it waits for `timer_wake` only).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let leftover = lock(&self.main).next_leftover;
        let backoff = lock(&self.hot).backoff.next_expiry();
        match (leftover, backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
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

    /// Starts the flush loop unless it runs already (or the queue is closed): on the current
    /// runtime, or from a plain thread on the queue's (see [`QueueClock`]). With no live
    /// runtime it does nothing: the items wait, and the next call from inside one (an
    /// insertion, a move or a `pop` that has to wait) starts the loop. A loop whose runtime
    /// shut down is replaced the same way, and the new one takes over every waiting item (it
    /// reads the backoff head and scans unschedulable like any loop).
    pub(crate) fn ensure_flush_task(&self) {
        let mut task = lock(&self.flush_task);
        if task.running().is_some() || lock(&self.hot).closed {
            return;
        }
        let Some(runtime) = self.clock.runtime() else {
            trace!("no tokio runtime here: the flush loop starts at the next call inside one");
            return;
        };
        let restart = task.has_ended();
        let span = tracing::debug_span!("scheduling_queue_flush");
        let flush = flush_loop(self.me.clone(), self.timer_wake.clone()).instrument(span);
        if !task.start(&runtime, flush) {
            // A runtime that has shut down drops the loop at once.
            trace!(
                "the queue's runtime has shut down: the flush loop starts at the next call inside one"
            );
            return;
        }
        if restart {
            debug!("flush loop restarted: the runtime of the previous one shut down");
        }
        self.clock.set_runtime(&runtime);
    }

    /// Takes back a popped item whose attempt failed (see
    /// [`SchedulingQueue::add_unschedulable_if_not_present`]). `flight` is the item's flight if
    /// it was popped from this queue; only that flight ends, never a later one of the same key.
    /// With `only_in_flight` (a guard dropped without a verdict), an item whose flight already
    /// ended (by `done` of its key, or on shutdown) is not queued again.
    ///
    /// [`SchedulingQueue::add_unschedulable_if_not_present`]: super::SchedulingQueue::add_unschedulable_if_not_present
    pub(crate) fn hand_back(
        &self,
        mut item: QueuedItem<K, T>,
        flight: Option<u64>,
        cycle: u64,
        only_in_flight: bool,
    ) -> Result<(), AlreadyQueuedError<K, T>> {
        let now = self.clock.now();
        // A guard whose flight already ended (by `done` of its key, or on shutdown) has nothing
        // to hand back. Seen under `hot` alone, so such a drop never waits behind a scan under
        // `main`; a flight that has ended never becomes current again, so the look is final.
        let in_flight = |hot: &Hot<K, T, C>| {
            flight.is_some_and(|f| hot.active.in_flight.is_current(&item.key, f))
        };
        if only_in_flight && !in_flight(&lock(&self.hot)) {
            return Ok(());
        }
        let mut main = lock(&self.main);
        let events = {
            let mut hot = lock(&self.hot);
            let key = &item.key;
            let current = in_flight(&hot);
            if !current && only_in_flight {
                return Ok(());
            }
            let events = if current {
                let events = hot.active.in_flight.events_for(key);
                hot.active.in_flight.done(key);
                events
            } else {
                None
            };
            if hot.active.heap.contains_key(key)
                || hot.backoff.contains_key(key)
                || main.unschedulable.contains_key(key)
            {
                return Err(AlreadyQueuedError(item));
            }
            events
        };
        let errored = item.has_no_rejectors();
        let inner = item.inner_mut();
        if errored {
            inner.consecutive_errors = inner.consecutive_errors.saturating_add(1);
        } else {
            inner.unschedulable_count = inner.unschedulable_count.saturating_add(1);
            inner.consecutive_errors = 0;
        }
        item.set_timestamp(now);
        item.seq = self.next_seq();
        let strategy = if errored {
            Strategy::AfterBackoff
        } else if let Some(events) = events {
            replay(&self.hooks, &item, &events)
        } else if main.move_request_cycle.is_some_and(|m| m >= cycle) {
            Strategy::AfterBackoff
        } else {
            Strategy::Skip
        };
        let dest = self.prepare(item, strategy, now, true);
        let mut wake = Wake::default();
        self.commit(&mut main, &mut lock(&self.hot), dest, now, &mut wake);
        drop(main);
        self.wake(wake);
        Ok(())
    }

    /// Moves the unschedulable items `select` picks out, in one pass: `select` gives the
    /// strategy of a candidate (`None` or `Skip` leaves it), the gates are asked while the
    /// item is still in the map (a refused item stays there, stamped `flushed_at`), and the
    /// others go to backoff or active in chunks of [`CHUNK`], each under a short hold of the
    /// hot lock, while the scan goes on. `event` is recorded for the items in flight.
    ///
    /// One pass keeps each item in cache from its hint to its heap, and nothing is collected
    /// into an intermediate list.
    pub(crate) fn move_where(
        &self,
        main: &mut Main<K, T>,
        event: &ClusterEvent,
        payload: &EventPayload,
        now: Instant,
        mut select: impl FnMut(&QueuedItem<K, T>) -> Option<Strategy>,
    ) -> usize {
        let candidates = main.unschedulable.len();
        let scanned = Cell::new(0usize);
        let chosen = Cell::new(Strategy::Skip);
        let mut mover = Mover {
            shared: self,
            event,
            payload,
            now,
            pending: Vec::with_capacity(CHUNK.min(candidates)),
            candidates,
            moved: 0,
            recorded: false,
        };
        let picked = main.unschedulable.extract(|item| {
            scanned.set(scanned.get() + 1);
            let Some(strategy) = select(item).filter(|s| *s != Strategy::Skip) else {
                return false;
            };
            if self.gate_in_place(item) {
                item.inner_mut().flushed_at = Some(now);
                return false;
            }
            chosen.set(strategy);
            true
        });
        for item in picked {
            mover.push(self.place(item, chosen.get(), now), scanned.get());
        }
        let moved = mover.finish();
        debug!(
            event = event.label,
            moved, "moved items out of unschedulable"
        );
        moved
    }

    pub(crate) fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        let mut main = lock(&self.main);
        let due = |item: &QueuedItem<K, T>| self.leftover_deadline(item).is_some_and(|d| d <= now);
        let moved = if main.unschedulable.items().any(due) {
            self.move_where(
                &mut main,
                &ClusterEvent::UNSCHEDULABLE_TIMEOUT,
                &EventPayload::none(),
                now,
                |item| due(item).then_some(Strategy::AfterBackoff),
            )
        } else {
            0
        };
        // The items left (refused gates stamped `now`) set the next deadline.
        main.next_leftover = main
            .unschedulable
            .items()
            .filter_map(|item| self.leftover_deadline(item))
            .min();
        moved
    }

    /// What the flush loop does at a deadline: the backoff items whose backoff ended, then,
    /// if a leftover deadline has passed, the leftover flush.
    fn flush_due(&self, now: Instant) {
        self.flush_backoff_completed(now);
        if lock(&self.main)
            .next_leftover
            .is_some_and(|next| next <= now)
        {
            self.flush_unschedulable_leftover(now);
        }
    }
}

/// The strongest strategy the recorded `events` give `item` (stops at "immediately").
fn replay<K: PartialEq, T>(
    hooks: &Hooks<K, T>,
    item: &QueuedItem<K, T>,
    events: &[RecordedEvent<K>],
) -> Strategy {
    let mut best = Strategy::Skip;
    for (event, payload, target) in events {
        best = best.max(hooks.strategy(item, event, payload, target.as_ref()));
        if best == Strategy::Immediately {
            break;
        }
    }
    best
}

/// The background loop: a `select` shell around the flushes. It holds only a `Weak` to the
/// state, and ends on `shut_down` or when the last handle drops (see [`BackgroundTask`]). It
/// starts lazily (see [`SchedulingState::ensure_flush_task`]), so a queue can be built outside a
/// runtime and outlive the runtime of its first loop.
///
/// One timer: a sleep until the earliest deadline (see [`SchedulingState::next_deadline`]), re-armed
/// through `timer` when a deadline gets earlier; with no deadline, no timer at all, so under
/// paused time the clock jumps straight to the next deadline.
async fn flush_loop<K, T, C>(weak: Weak<SchedulingState<K, T, C>>, timer: Arc<Notify>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    while let Some(next) = weak.upgrade().map(|s| s.next_deadline()) {
        let Some(deadline) = next else {
            timer.notified().await;
            continue;
        };
        let notified = std::pin::pin!(timer.notified());
        let sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
        // `select` polls the wake-up first: a deadline that got earlier re-arms the sleep.
        if let Either::Right(((), _)) = future::select(notified, sleep).await
            && let Some(s) = weak.upgrade()
        {
            s.flush_due(Instant::now());
        }
    }
    debug!("flush loop ended");
}
