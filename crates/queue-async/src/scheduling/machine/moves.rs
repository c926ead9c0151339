//! The moves of [`SchedulingRules`] between sub-queues that need no caller's choice of item:
//! on events (through the hints) and at the backoff and leftover deadlines.

use std::cell::Cell;
use std::hash::Hash;
use tokio::time::Instant;

use super::event::{ClusterEvent, EventPayload};
use super::hints::Strategy;
use super::item::QueuedItem;
use super::parts::{Parked, Ready};
use super::rules::{Placement, SchedulingRules};
use ctrlq_queue_core::Compare;

impl<K, T> SchedulingRules<K, T>
where
    K: Hash + Eq + Clone,
{
    /// Moves every backoff item whose expiry is at or before `now` to active; how many.
    pub(crate) fn flush_backoff_completed<C: Compare<QueuedItem<K, T>>>(
        &self,
        ready: &mut Ready<K, T, C>,
        now: Instant,
    ) -> usize {
        let mut count = 0;
        while let Some(item) = ready.backoff.pop_completed(now) {
            ready.active.push(item, now);
            count += 1;
        }
        count
    }

    /// Moves every item in backoff to active, stamped `now`, whether its backoff is over or
    /// not: for a queue whose timer can no longer ring (the runtime that timed it is gone), so
    /// that no item waits for an expiry nothing will act on. Returns how many moved.
    pub(crate) fn flush_backoff_all<C: Compare<QueuedItem<K, T>>>(
        &self,
        ready: &mut Ready<K, T, C>,
        now: Instant,
    ) -> usize {
        let mut count = 0;
        while let Some(item) = ready
            .backoff
            .next_expiry()
            .and_then(|at| ready.backoff.pop_completed(at))
        {
            ready.active.push(item, now);
            count += 1;
        }
        count
    }

    /// Tells the rules `event` happened: each unschedulable item that `pre_check` accepts and
    /// whose rejectors' hints answer `Queue` is taken out and handed to `sink` with where it
    /// goes (backoff, or active if its backoff is over or a pending plugin answered), and how
    /// many candidates the scan has seen. Gated items move only on an event their gate
    /// registered for, and only if the gates then let them in; a refused one stays, stamped
    /// `now`. Returns how many moved. The caller records the move request and the event for
    /// the items in flight.
    pub(crate) fn move_matching(
        &self,
        parked: &mut Parked<K, T>,
        event: &ClusterEvent,
        payload: &EventPayload,
        now: Instant,
        mut pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
        sink: impl FnMut(Placement<K, T>, usize),
    ) -> usize {
        if !self.hooks.is_of_interest(event) {
            return 0;
        }
        let hints = self.hooks.hints_for(event);
        let select = |item: &QueuedItem<K, T>| {
            pre_check(item).then(|| self.hooks.strategy_with(&hints, item, event, payload, None))
        };
        self.move_where(parked, now, select, sink)
    }

    /// Moves the unschedulable items queued more than the configured maximum before `now`
    /// (strictly) to backoff or active through `sink` (as [`move_matching`]); gated ones are
    /// re-checked by their gates, at most once per maximum. Then sets the next leftover
    /// deadline from the items left. Returns how many moved.
    ///
    /// [`move_matching`]: Self::move_matching
    pub(crate) fn move_leftover(
        &self,
        parked: &mut Parked<K, T>,
        now: Instant,
        sink: impl FnMut(Placement<K, T>, usize),
    ) -> usize {
        let moved = if self.any_leftover_due(parked, now) {
            let due = |item: &QueuedItem<K, T>| {
                let due = self.leftover_deadline(item).is_some_and(|d| d <= now);
                due.then_some(Strategy::AfterBackoff)
            };
            self.move_where(parked, now, due, sink)
        } else {
            0
        };
        // The items left (refused gates stamped `now`) set the next deadline.
        self.refresh_next_leftover(parked);
        moved
    }

    /// Moves the unschedulable items `select` picks out, in one pass: `select` gives the
    /// strategy of a candidate (`None` or `Skip` leaves it), the gates are asked while the
    /// item is still in the map (a refused item stays there, stamped `flushed_at`), and the
    /// others go to `sink` as the scan goes on, with how many candidates it has seen.
    fn move_where(
        &self,
        parked: &mut Parked<K, T>,
        now: Instant,
        mut select: impl FnMut(&QueuedItem<K, T>) -> Option<Strategy>,
        mut sink: impl FnMut(Placement<K, T>, usize),
    ) -> usize {
        let scanned = Cell::new(0usize);
        let chosen = Cell::new(Strategy::Skip);
        let picked = parked.unschedulable.extract(|item| {
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
        let mut moved = 0;
        for item in picked {
            sink(self.place(item, chosen.get(), now), scanned.get());
            moved += 1;
        }
        moved
    }
}
