//! The two halves of the scheduling state: [`Parked`] (unschedulable items and the move
//! bookkeeping) and [`Ready`] (active, backoff and the in-flight record). The queue guards
//! each with its own lock, so a pop (which needs only [`Ready`]) never waits behind a scan of
//! [`Parked`].

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use tokio::time::Instant;

use super::active::{ActiveQueue, InFlightEntry};
use super::backoff::BackoffQueue;
use super::event::{ClusterEvent, EventPayload};
use super::item::{PriorityOrder, QueuedItem};
use super::pending::SubQueue;
use super::unschedulable::Unschedulable;
use ctrlq_queue_core::Compare;

/// The unschedulable items (rejected or gated, waiting for an event) and what decides where
/// failed items go: the cycle of the last move request and the next leftover deadline.
///
/// The transitions that touch it are on [`SchedulingRules`].
///
/// [`SchedulingRules`]: super::SchedulingRules
pub(crate) struct Parked<K, T> {
    pub(crate) unschedulable: Unschedulable<K, T>,
    /// The cycle of the last move request (event or activation); decides where an item that
    /// was not tracked in flight goes on failure.
    pub(crate) move_request_cycle: Option<u64>,
    /// When the leftover flush must next look at unschedulable: at or before the earliest
    /// leftover deadline of the items there, `None` if nothing there is due ever. It may be
    /// early (the item left, or its gates were asked again since): that costs one scan that
    /// moves nothing. It is never late, so no item waits past its deadline.
    pub(crate) next_leftover: Option<Instant>,
    /// The insertion sequence: the last tiebreak of every order. Every insertion that takes a
    /// number goes through this half.
    pub(crate) seq: u64,
}

/// The active sub-queue (a heap in the caller's order), the backoff sub-queue (heaps by
/// expiry), the in-flight record, the scheduling cycle and whether the state is closed.
pub(crate) struct Ready<K, T, C = PriorityOrder> {
    pub(crate) active: ActiveQueue<K, T, C>,
    pub(crate) backoff: BackoffQueue<K, T, C>,
    pub(crate) closed: bool,
    /// The scheduling cycle: how many items were popped.
    pub(crate) cycle: u64,
}

// ===== impl Parked =====

impl<K: Hash + Eq, T> Parked<K, T> {
    pub(crate) fn new() -> Self {
        Parked {
            unschedulable: Unschedulable::new(),
            move_request_cycle: None,
            next_leftover: None,
            seq: 0,
        }
    }

    /// Whether `key` is unschedulable.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.unschedulable.contains_key(key)
    }

    /// The unschedulable keys, in unspecified order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.unschedulable.keys()
    }

    /// The cycle of the last move request, if any.
    #[cfg(test)]
    pub(crate) fn move_request_cycle(&self) -> Option<u64> {
        self.move_request_cycle
    }

    /// Records a move request (an event or an activation) in scheduling cycle `cycle`: an item
    /// popped in or before it that fails goes to backoff, not unschedulable.
    pub(crate) fn request_move(&mut self, cycle: u64) {
        self.move_request_cycle = Some(cycle);
    }

    /// When the leftover flush must next look at the unschedulable items (never late, maybe
    /// early); `None` if no item there is ever due.
    pub(crate) fn next_leftover(&self) -> Option<Instant> {
        self.next_leftover
    }

    /// Removes `key` and hands back its item.
    #[cfg(test)]
    pub(crate) fn remove(&mut self, key: &K) -> Option<QueuedItem<K, T>> {
        self.unschedulable.remove(key)
    }

    /// The next insertion sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }
}

impl<K, T> Parked<K, T> {
    /// How many items are unschedulable.
    pub(crate) fn len(&self) -> usize {
        self.unschedulable.len()
    }

    /// Whether no item is unschedulable.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ===== impl Ready =====

impl<K, T, C> Ready<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    pub(crate) fn new(order: C) -> Self {
        let order = Arc::new(order);
        Ready {
            active: ActiveQueue::new(order.clone()),
            backoff: BackoffQueue::new(order),
            closed: false,
            cycle: 0,
        }
    }

    /// Which of active and backoff holds `key`, if either does.
    pub(crate) fn where_is(&self, key: &K) -> Option<SubQueue> {
        if self.active.heap.contains_key(key) {
            Some(SubQueue::Active)
        } else if self.backoff.contains_key(key) {
            Some(SubQueue::Backoff)
        } else {
            None
        }
    }

    /// Replaces the data of `key` in active or backoff, re-ordering it; hands `data` back if
    /// `key` is in neither.
    pub(crate) fn replace_data(&mut self, key: &K, data: T) -> Result<(), T> {
        let mut data = Some(data);
        let mut put = |item: &mut QueuedItem<K, T>| {
            item.data = data.take().expect("the update runs once");
        };
        if self.active.heap.contains_key(key) {
            self.active.heap.update(key, &mut put);
        } else {
            self.backoff.update(key, &mut put);
        }
        // The data is still here exactly when neither held the key.
        match data {
            Some(data) => Err(data),
            None => Ok(()),
        }
    }

    /// The keys in active, in unspecified order.
    pub(crate) fn active_keys(&self) -> impl Iterator<Item = &K> {
        self.active.heap.iter().map(|(k, _)| k)
    }

    /// The keys in backoff, in unspecified order.
    pub(crate) fn backoff_keys(&self) -> impl Iterator<Item = &K> {
        self.backoff.keys()
    }

    /// The earliest backoff expiry.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.backoff.next_expiry()
    }

    /// Makes room for `active` and `backoff` more items, so a large move does not re-hash as
    /// it grows.
    pub(crate) fn reserve(&mut self, active: usize, backoff: usize) {
        self.active.reserve(active);
        self.backoff.reserve(backoff);
    }

    /// Whether `key` is in flight (popped, not yet done or handed back).
    pub(crate) fn is_in_flight(&self, key: &K) -> bool {
        self.active.in_flight.contains(key)
    }

    /// Whether `flight` is `key`'s current flight.
    pub(crate) fn is_current_flight(&self, key: &K, flight: u64) -> bool {
        self.active.in_flight.is_current(key, flight)
    }

    /// The keys in flight, in arbitrary order.
    pub(crate) fn in_flight_keys(&self) -> Vec<K> {
        self.active.in_flight.keys()
    }

    /// The in-flight list: markers and the events recorded after them, in order.
    pub(crate) fn in_flight_entries(&self) -> Vec<InFlightEntry<K>> {
        self.active.in_flight.entries()
    }

    /// Records `event` (targeted at `target`, if any) for the items in flight; nothing if none.
    pub(crate) fn record(&mut self, event: ClusterEvent, payload: EventPayload, target: Option<K>) {
        self.active.in_flight.record(event, payload, target);
    }

    /// Ends the flight of `key` (a success); false if it was not in flight.
    pub(crate) fn done(&mut self, key: &K) -> bool {
        self.active.in_flight.done(key)
    }

    /// Ends `flight` of `key` if it is still the key's current flight.
    pub(crate) fn end_flight(&mut self, key: &K, flight: u64) {
        if self.active.in_flight.is_current(key, flight) {
            self.active.in_flight.done(key);
        }
    }
}

impl<K, T, C> Ready<K, T, C> {
    /// How many keys are in flight.
    pub(crate) fn in_flight_len(&self) -> usize {
        self.active.in_flight.len()
    }

    /// How many items are in backoff.
    pub(crate) fn backoff_len(&self) -> usize {
        self.backoff.len()
    }

    /// How many items are in active.
    pub(crate) fn active_len(&self) -> usize {
        self.active.heap.len()
    }

    /// The scheduling cycle: how many items were popped.
    #[cfg(test)]
    pub(crate) fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Whether the state is closed: nothing pops, and adds are refused.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }
}

impl<K: Hash + Eq + Clone, T, C> Ready<K, T, C> {
    /// Closes the state and ends every flight.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.active.in_flight.clear();
    }
}

impl<K, T> fmt::Debug for Parked<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parked")
            .field("unschedulable", &self.unschedulable.len())
            .field("move_request_cycle", &self.move_request_cycle)
            .finish_non_exhaustive()
    }
}

impl<K, T, C> fmt::Debug for Ready<K, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ready")
            .field("active", &self.active.heap.len())
            .field("backoff", &self.backoff.len())
            .field("in_flight", &self.active.in_flight.len())
            .field("cycle", &self.cycle)
            .field("closed", &self.closed)
            .finish()
    }
}
