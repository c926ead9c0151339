//! The moves of [`SchedulingState`] between sub-queues that need no caller's choice of item:
//! on events (through the hints) and at the backoff and leftover deadlines.

use std::cell::Cell;
use std::hash::Hash;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::active;
use super::event::{ClusterEvent, EventPayload};
use super::hints::{Hooks, Strategy};
use super::item::QueuedItem;
use super::state::{SchedulingState, enter};

/// How many items a move inserts before it makes room for the rest (see `move_where`).
const SAMPLE: usize = 256;

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// Moves the backoff items whose expiry is at or before `until` to active, stamped `now`,
    /// earliest expiry first; how many. With `until` `None`, every item moves, whether its
    /// backoff is over or not: for a queue whose timer can no longer ring (the runtime that
    /// timed it is gone), so that no item waits for an expiry nothing will act on.
    pub(crate) fn flush_backoff(&mut self, until: Option<Instant>, now: Instant) -> usize {
        let mut count = 0;
        while let Some(item) = self.backoff.pop_completed(until) {
            active::push(&mut self.active, item, now);
            count += 1;
        }
        if count > 0 {
            trace!(count, "backoff ended");
        }
        count
    }

    /// Tells the state `event` happened: records a move request and the event for the items
    /// in flight, then each unschedulable item that `pre_check` accepts and whose rejectors'
    /// hints answer `Queue` moves to backoff, or to active if its backoff is over or a pending
    /// plugin answered. Gated items move only on an event their gate registered for, and only
    /// if the gates then let them in; a refused one stays. An event no hint or gate registered
    /// for changes nothing. Returns how many moved.
    pub(crate) fn move_matching(
        &mut self,
        event: &ClusterEvent,
        payload: EventPayload,
        now: Instant,
        mut pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
    ) -> usize {
        if !self.hooks.is_of_interest(event) {
            trace!(event = event.label, "event of no interest dropped");
            return 0;
        }
        self.move_request_cycle = Some(self.cycle);
        self.in_flight.record(*event, payload.clone(), None);
        let hints = self.hooks.hints_for(event);
        let select = |hooks: &Hooks<K, T>, item: &QueuedItem<K, T>| {
            pre_check(item).then(|| hooks.strategy(&hints, item, event, &payload, None))
        };
        self.move_where(event, now, select)
    }

    /// Moves the unschedulable items queued more than the configured maximum before `now`
    /// (strictly) to backoff or active; gated ones are re-checked by their gates, at most once
    /// per maximum. When any is due, the `UNSCHEDULABLE_TIMEOUT` event is recorded for the
    /// items in flight. Then sets the next leftover deadline from the items left. Returns how
    /// many moved.
    pub(crate) fn flush_unschedulable_leftover(&mut self, now: Instant) -> usize {
        let config = self.config;
        let is_due =
            |item: &QueuedItem<K, T>| config.leftover_deadline(item).is_some_and(|d| d <= now);
        let mut moved = 0;
        if self.unschedulable.items().any(is_due) {
            let event = ClusterEvent::UNSCHEDULABLE_TIMEOUT;
            self.in_flight.record(event, EventPayload::none(), None);
            let due = |_: &Hooks<K, T>, item: &QueuedItem<K, T>| {
                is_due(item).then_some(Strategy::AfterBackoff)
            };
            moved = self.move_where(&event, now, due);
        }
        // The items left (refused gates stamped `now`) set the next deadline.
        self.next_leftover = self
            .unschedulable
            .items()
            .filter_map(|item| config.leftover_deadline(item))
            .min();
        moved
    }

    /// The timed moves due at `now`: the backoff items whose expiry has passed, and the
    /// leftover flush if its deadline has.
    pub(crate) fn flush_due(&mut self, now: Instant) {
        self.flush_backoff(Some(now), now);
        if self.next_leftover.is_some_and(|next| next <= now) {
            self.flush_unschedulable_leftover(now);
        }
    }

    /// When the state next moves an item by itself: the earlier of the backoff head's expiry
    /// and the next leftover deadline (never late, maybe early).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.next_leftover
            .into_iter()
            .chain(self.backoff.next_expiry())
            .min()
    }

    /// Moves the unschedulable items `select` picks out on `event`, in one pass: `select` gives the
    /// strategy of a candidate (`None` or `Skip` leaves it), the gates are asked while the
    /// item is still in the map (a refused item stays there, stamped `flushed_at`), and the
    /// others are inserted as the scan goes on, so a hint or gate that panics loses no item.
    fn move_where(
        &mut self,
        event: &ClusterEvent,
        now: Instant,
        mut select: impl FnMut(&Hooks<K, T>, &QueuedItem<K, T>) -> Option<Strategy>,
    ) -> usize {
        let SchedulingState {
            config,
            hooks,
            active,
            backoff,
            unschedulable,
            ..
        } = self;
        let (candidates, scanned) = (unschedulable.len(), Cell::new(0));
        let chosen = Cell::new(Strategy::Skip);
        let picked = unschedulable.extract(|item| {
            scanned.set(scanned.get() + 1);
            let Some(strategy) = select(hooks, item).filter(|s| *s != Strategy::Skip) else {
                return false;
            };
            if hooks.gate_in_place(item) {
                item.marks_mut().flushed_at = Some(now);
                return false;
            }
            chosen.set(strategy);
            true
        });
        let (mut moved, mut to_active) = (0, 0);
        for item in picked {
            to_active += usize::from(enter(active, backoff, config, item, chosen.get(), now));
            moved += 1;
            if moved == SAMPLE {
                // How many more will move, and where, as the first picks went: room for them
                // now, so that a large move does not re-hash the heaps as they grow.
                let rest = (candidates - scanned.get()) * SAMPLE / scanned.get();
                active.reserve(rest * to_active / SAMPLE);
                backoff
                    .rejected
                    .reserve(rest * (SAMPLE - to_active) / SAMPLE);
            }
        }
        debug!(
            event = event.label,
            moved, "moved items out of unschedulable"
        );
        moved
    }
}
