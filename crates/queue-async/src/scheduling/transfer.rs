//! Moving queued items between sub-queues on what the queue learns: an event (`move_with`,
//! in chunks under the hot lock) or a failed item handed back (`hand_back`). The decisions
//! are the state machine's ([`SchedulingRules`]); this file holds the lock scopes.
//!
//! [`SchedulingRules`]: super::machine::SchedulingRules

use std::hash::Hash;

use super::machine::{ClusterEvent, EventPayload, Parked, Placement, Return, Wake};
use ctrlq_queue_core::Compare;
use tokio::time::Instant;
use tracing::debug;

use super::QueuedItem;
use super::error::AlreadyQueuedError;
use super::state::{LockedScheduling, lock};

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
    shared: &'a LockedScheduling<K, T, C>,
    event: &'a ClusterEvent,
    payload: &'a EventPayload,
    now: Instant,
    pending: Vec<Placement<K, T>>,
    /// The unschedulable items before the scan, to estimate how many will move.
    candidates: usize,
    /// Whether the event has been recorded for the items in flight (at the first commit).
    recorded: bool,
}

impl<K, T, C> Mover<'_, K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    fn push(&mut self, placement: Placement<K, T>, scanned: usize) {
        self.pending.push(placement);
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
            hot.record(*self.event, self.payload.clone(), None);
            if let Some(scanned) = scanned.filter(|s| *s > 0) {
                let rest = self.candidates.saturating_sub(scanned) * self.pending.len() / scanned;
                let to_backoff = self
                    .pending
                    .iter()
                    .filter(|p| matches!(p, Placement::Backoff(..)))
                    .count();
                let to_active = self.pending.len() - to_backoff;
                let per = self.pending.len();
                hot.reserve(rest * to_active / per, rest * to_backoff / per);
            }
        }
        for placement in self.pending.drain(..) {
            // A move only ever places items in active or backoff.
            if let Ok(w) = self
                .shared
                .rules
                .commit_ready(&mut hot, placement, self.now)
            {
                wake |= w;
            }
        }
        drop(hot);
        self.shared.wake(wake);
    }

    /// Commits the rest (and records the event if nothing moved).
    fn finish(mut self) {
        self.commit(None);
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

impl<K, T, C> LockedScheduling<K, T, C>
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
        item: QueuedItem<K, T>,
        flight: Option<u64>,
        cycle: u64,
        only_in_flight: bool,
    ) -> Result<(), AlreadyQueuedError<K, T>> {
        let now = self.clock.now();
        // A guard whose flight already ended (by `done` of its key, or on shutdown) has nothing
        // to hand back. Seen under `hot` alone, so such a drop never waits behind a scan under
        // `main`; a flight that has ended never becomes current again, so the look is final.
        let current = || flight.is_some_and(|f| lock(&self.hot).is_current_flight(item.key(), f));
        if only_in_flight && !current() {
            return Ok(());
        }
        let mut main = lock(&self.main);
        let claim = {
            let mut hot = lock(&self.hot);
            self.rules
                .claim_return(&main, &mut hot, item, flight, only_in_flight)
        };
        let returned = match claim {
            Return::Accepted(returned) => returned,
            Return::AlreadyQueued(item) => return Err(AlreadyQueuedError(item)),
            Return::Ended => return Ok(()),
        };
        // The hints and gates run under `main` alone.
        let placement = self.rules.requeue(&mut main, returned, cycle, now);
        let wake = self
            .rules
            .commit(&mut main, &mut lock(&self.hot), placement, now);
        drop(main);
        self.wake(wake);
        Ok(())
    }

    /// Runs a move of the state machine (`scan`, handed a sink for the items it picks) over
    /// `main`, committing the picked items to `hot` in chunks as the scan goes, and records
    /// `event` for the items in flight. Returns how many moved.
    pub(crate) fn move_with(
        &self,
        main: &mut Parked<K, T>,
        event: &ClusterEvent,
        payload: &EventPayload,
        now: Instant,
        scan: impl FnOnce(&mut Parked<K, T>, &mut dyn FnMut(Placement<K, T>, usize)) -> usize,
    ) -> usize {
        let candidates = main.len();
        let mut mover = Mover {
            shared: self,
            event,
            payload,
            now,
            pending: Vec::with_capacity(CHUNK.min(candidates)),
            candidates,
            recorded: false,
        };
        let moved = scan(main, &mut |placement, scanned| {
            mover.push(placement, scanned);
        });
        mover.finish();
        debug!(
            event = event.label,
            moved, "moved items out of unschedulable"
        );
        moved
    }
}
