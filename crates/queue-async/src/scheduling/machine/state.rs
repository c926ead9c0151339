//! [`SchedulingState`]: the scheduling queue's state machine in one value, every operation one
//! call over both halves: the single-owner harness the model tests drive (the queue holds the
//! halves under its own locks and calls the same steps of [`SchedulingRules`]).

use std::hash::Hash;
use tokio::time::Instant;

use super::active::InFlightEntry;
use super::config::{ConfigError, SchedulingQueueConfig};
use super::event::{ClusterEvent, EventPayload};
use super::item::{Priority, PriorityOrder, QueuedItem};
use super::parts::{Parked, Ready};
use super::pending::{Pending, SubQueue};
use super::rules::{Flight, Return, SchedulingRules, Wake};
use ctrlq_queue_core::Compare;

/// The state machine of kube-scheduler's scheduling queue, for any keyed item: the active,
/// backoff and unschedulable sub-queues, the in-flight record with the events seen meanwhile,
/// attempts, gates and hints, and the rules that move items between them. No clock is read:
/// every operation that depends on time takes `now`.
///
/// Every queued key is in exactly one sub-queue; a popped key is in flight until
/// [`done`](Self::done) or [`hand_back`](Self::hand_back), and a key in flight is never popped
/// again. The queue guards each half with its own lock instead; [`SchedulingRules`] holds the
/// steps both use.
#[derive(Debug)]
pub(crate) struct SchedulingState<K, T, C = PriorityOrder> {
    rules: SchedulingRules<K, T>,
    parked: Parked<K, T>,
    ready: Ready<K, T, C>,
}

/// The rules and the two halves of a state, borrowed.
type PartsMut<'a, K, T, C> = (
    &'a SchedulingRules<K, T>,
    &'a mut Parked<K, T>,
    &'a mut Ready<K, T, C>,
);

// ===== impl SchedulingState =====

impl<K, T> SchedulingState<K, T, PriorityOrder>
where
    K: Hash + Eq + Clone,
    T: Priority,
{
    /// An empty state with `config`, no hints, no gates, in [`PriorityOrder`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent.
    pub(crate) fn new(config: SchedulingQueueConfig) -> Result<Self, ConfigError> {
        Self::with_rules(SchedulingRules::new(config))
    }

    /// An empty state with `rules`, in [`PriorityOrder`].
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent.
    pub(crate) fn with_rules(rules: SchedulingRules<K, T>) -> Result<Self, ConfigError> {
        Self::with_order(rules, PriorityOrder)
    }
}

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// An empty state with `rules`, the active sub-queue ordered by `order` (`Less` pops
    /// first; equal items in queueing order).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent.
    pub(crate) fn with_order(rules: SchedulingRules<K, T>, order: C) -> Result<Self, ConfigError> {
        rules.config().validate()?;
        Ok(SchedulingState {
            rules,
            parked: Parked::new(),
            ready: Ready::new(order),
        })
    }

    /// The rules and the two halves, borrowed for a step of [`SchedulingRules`].
    pub(crate) fn parts_mut(&mut self) -> PartsMut<'_, K, T, C> {
        (&self.rules, &mut self.parked, &mut self.ready)
    }

    /// Queues an item: to active, unless a gate refuses it (then to unschedulable). A queued
    /// key gets the new data and timestamp, keeps its counters and goes to active; a key in
    /// flight gets a second copy, which `pop` discards while the first is in flight.
    ///
    /// # Errors
    ///
    /// The key and data, once closed.
    pub(crate) fn add(&mut self, key: K, data: T, now: Instant) -> Result<Wake, (K, T)> {
        if self.ready.is_closed() {
            return Err((key, data));
        }
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        let item = match rules.take(parked, ready, &key) {
            Some(item) => rules.refresh_item(parked, item, data, now),
            None => rules.new_item(parked, key, data, now),
        };
        let placement = rules.admit(item, now);
        Ok(rules.commit(parked, ready, placement, now))
    }

    /// Pops the most important item (see [`SchedulingRules::pop`]); `None` if nothing can be
    /// popped at `now` or once closed.
    pub(crate) fn pop(&mut self, now: Instant) -> Option<Flight<K, T>> {
        self.rules.pop(&mut self.ready, || now)
    }

    /// Ends the flight of `key` after a successful attempt; false if it was not in flight.
    pub(crate) fn done(&mut self, key: &K) -> bool {
        self.ready.done(key)
    }

    /// Takes back an item whose attempt failed, popped as flight `flight` (if from this state)
    /// in scheduling cycle `cycle` (see [`SchedulingRules::requeue`]).
    ///
    /// # Errors
    ///
    /// The item, changing nothing else, if its key is queued.
    pub(crate) fn hand_back(
        &mut self,
        item: QueuedItem<K, T>,
        flight: Option<u64>,
        cycle: u64,
        now: Instant,
    ) -> Result<Wake, QueuedItem<K, T>> {
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        match rules.claim_return(parked, ready, item, flight, false) {
            Return::Accepted(returned) => {
                let placement = rules.requeue(parked, returned, cycle, now);
                Ok(rules.commit(parked, ready, placement, now))
            }
            Return::AlreadyQueued(item) => Err(item),
            Return::Ended => Ok(Wake::default()),
        }
    }

    /// Moves `keys` from backoff or unschedulable to active at once (see
    /// [`SchedulingRules::activate`]); how many moved.
    pub(crate) fn activate(&mut self, keys: impl IntoIterator<Item = K>, now: Instant) -> usize {
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        let mut wake = Wake::default();
        let cycle = ready.cycle();
        keys.into_iter()
            .map(|key| rules.activate(parked, ready, key, cycle, now, &mut wake))
            .filter(|moved| *moved)
            .count()
    }

    /// [`move_matching`](Self::move_matching) with every unschedulable item as a candidate and
    /// no payload.
    pub(crate) fn move_all(&mut self, event: &ClusterEvent, now: Instant) -> usize {
        self.move_matching(event, EventPayload::none(), now, |_| true)
    }

    /// Tells the state `event` happened (see [`SchedulingRules::move_matching`]): records a
    /// move request and the event for the items in flight, and moves what the hints say.
    pub(crate) fn move_matching(
        &mut self,
        event: &ClusterEvent,
        payload: EventPayload,
        now: Instant,
        pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
    ) -> usize {
        if !self.rules.is_of_interest(event) {
            return 0;
        }
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        parked.request_move(ready.cycle());
        let sink = |placement, _| {
            let _ = rules.commit_ready(ready, placement, now);
        };
        let moved = rules.move_matching(parked, event, &payload, now, pre_check, sink);
        self.ready.record(*event, payload, None);
        moved
    }

    /// Replaces the data of `key` with the `events` the change amounts to. In flight: the
    /// events are recorded for it and the data is handed back. In active or backoff: replaced
    /// in place. In unschedulable: replaced, and the events judged as a move targeted at it.
    /// Not queued: added; once closed, the data is handed back.
    pub(crate) fn update(
        &mut self,
        key: K,
        data: T,
        events: &[ClusterEvent],
        now: Instant,
    ) -> Option<T> {
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        let (key, data) = match rules.update_ready(ready, key, data, events) {
            Ok(handed_back) => return handed_back,
            Err(rest) => rest,
        };
        match rules.update_parked(parked, key, data, events, now) {
            Ok(placement) => {
                rules.commit(parked, ready, placement, now);
                None
            }
            Err((key, data)) => self.add(key, data, now).err().map(|(_, data)| data),
        }
    }

    /// Removes `key` from whichever sub-queue holds it and returns its data. The in-flight
    /// record is not touched.
    pub(crate) fn delete(&mut self, key: &K) -> Option<T> {
        let item = self.rules.take(&mut self.parked, &mut self.ready, key);
        item.map(|item| item.data)
    }

    /// Moves every backoff item whose expiry is at or before `now` to active; how many.
    pub(crate) fn flush_backoff_completed(&mut self, now: Instant) -> usize {
        self.rules.flush_backoff_completed(&mut self.ready, now)
    }

    /// Moves every backoff item to active, stamped `now`, its expiry past or not (see
    /// [`SchedulingRules::flush_backoff_all`]); how many.
    pub(crate) fn flush_backoff_all(&mut self, now: Instant) -> usize {
        self.rules.flush_backoff_all(&mut self.ready, now)
    }

    /// Moves the unschedulable items past their leftover deadline at `now` (see
    /// [`SchedulingRules::move_leftover`]); how many.
    pub(crate) fn flush_unschedulable_leftover(&mut self, now: Instant) -> usize {
        let (rules, parked, ready) = (&self.rules, &mut self.parked, &mut self.ready);
        let due = rules.any_leftover_due(parked, now);
        let sink = |placement, _| {
            let _ = rules.commit_ready(ready, placement, now);
        };
        let moved = rules.move_leftover(parked, now, sink);
        if due {
            let event = ClusterEvent::UNSCHEDULABLE_TIMEOUT;
            self.ready.record(event, EventPayload::none(), None);
        }
        moved
    }

    /// When the state next moves an item by itself: the earlier of the backoff head's expiry
    /// and the next leftover deadline (never late, maybe early).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match (self.parked.next_leftover(), self.ready.next_expiry()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Closes the state: nothing pops and adds are refused; every flight ends. Queued items
    /// stay.
    pub(crate) fn shut_down(&mut self) {
        self.ready.close();
    }

    /// Which sub-queue holds `key`, if any.
    pub(crate) fn where_is(&self, key: &K) -> Option<SubQueue> {
        let parked = self.parked.contains(key).then_some(SubQueue::Unschedulable);
        self.ready.where_is(key).or(parked)
    }

    /// The keys in each sub-queue.
    pub(crate) fn pending(&self) -> Pending<K> {
        Pending {
            active: self.ready.active_keys().cloned().collect(),
            backoff: self.ready.backoff_keys().cloned().collect(),
            unschedulable: self.parked.keys().cloned().collect(),
        }
    }

    /// Whether `key` is in flight.
    pub(crate) fn is_in_flight(&self, key: &K) -> bool {
        self.ready.is_in_flight(key)
    }

    /// The in-flight list: markers and the events recorded after them, in order.
    pub(crate) fn in_flight_events(&self) -> Vec<InFlightEntry<K>> {
        self.ready.in_flight_entries()
    }

    /// The scheduling cycle: how many items were popped.
    pub(crate) fn scheduling_cycle(&self) -> u64 {
        self.ready.cycle()
    }

    /// How many items are queued in the three sub-queues.
    pub(crate) fn len(&self) -> usize {
        self.ready.active_len() + self.ready.backoff_len() + self.parked.len()
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
