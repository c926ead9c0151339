//! Moving queued items between sub-queues on what the queue learns: an event (`move_where`,
//! through the hints, in chunks under the hot lock) or a failed item handed back
//! (`hand_back`, replaying the events it missed while in flight).

use std::cell::Cell;
use std::hash::Hash;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;
use tracing::debug;

use super::active::RecordedEvent;
use super::error::AlreadyQueuedError;
use super::event::{ClusterEvent, EventPayload};
use super::hints::{Hooks, Strategy};
use super::item::QueuedItem;
use super::state::{Dest, Hot, Main, SchedulingState, Wake, lock};

/// How many moved items are inserted per hold of the hot lock, so `pop` never waits long.
const CHUNK: usize = 256;

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

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
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
