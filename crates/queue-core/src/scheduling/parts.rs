//! The two halves of a [`SchedulingState`]: [`Parked`] (unschedulable items and the move
//! bookkeeping) and [`Ready`] (active, backoff and the in-flight record). A concurrent queue
//! guards each with its own lock, so a pop (which needs only [`Ready`]) never waits behind a
//! scan of [`Parked`].
//!
//! [`SchedulingState`]: super::SchedulingState

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use super::active::{ActiveQueue, InFlightEntry};
use super::backoff::BackoffQueue;
use super::event::{ClusterEvent, EventPayload};
use super::item::{PriorityOrder, QueuedItem};
use super::pending::SubQueue;
use super::unschedulable::Unschedulable;
use crate::Compare;
use crate::Moment;

/// The unschedulable items (rejected or gated, waiting for an event) and what decides where
/// failed items go: the cycle of the last move request and the next leftover deadline.
///
/// Built by [`SchedulingState::new`] and taken apart with [`SchedulingState::into_parts`];
/// the transitions that touch it are on [`SchedulingRules`].
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::scheduling::{SchedulingQueueConfig, SchedulingState};
///
/// let state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// let (_rules, parked, _ready) = state.into_parts();
/// assert_eq!((parked.len(), parked.move_request_cycle()), (0, None));
/// ```
///
/// [`SchedulingState::new`]: super::SchedulingState::new
/// [`SchedulingState::into_parts`]: super::SchedulingState::into_parts
/// [`SchedulingRules`]: super::SchedulingRules
pub struct Parked<K, T, I = Instant> {
    pub(crate) unschedulable: Unschedulable<K, T, I>,
    /// The cycle of the last move request (event or activation); decides where an item that
    /// was not tracked in flight goes on failure.
    pub(crate) move_request_cycle: Option<u64>,
    /// When the leftover flush must next look at unschedulable: at or before the earliest
    /// leftover deadline of the items there, `None` if nothing there is due ever. It may be
    /// early (the item left, or its gates were asked again since): that costs one scan that
    /// moves nothing. It is never late, so no item waits past its deadline.
    pub(crate) next_leftover: Option<I>,
    /// The insertion sequence: the last tiebreak of every order. Every insertion that takes a
    /// number goes through this half.
    pub(crate) seq: u64,
}

/// The active sub-queue (a heap in the caller's order), the backoff sub-queue (heaps by
/// expiry), the in-flight record, the scheduling cycle and whether the state is closed.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::scheduling::{SchedulingQueueConfig, SchedulingState};
///
/// let mut state = SchedulingState::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// let now = std::time::Instant::now();
/// state.add("a", 1, now).unwrap();
/// let (_rules, _parked, ready) = state.into_parts();
/// assert_eq!((ready.active_len(), ready.cycle(), ready.is_closed()), (1, 0, false));
/// ```
pub struct Ready<K, T, C = PriorityOrder, I = Instant> {
    pub(crate) active: ActiveQueue<K, T, C, I>,
    pub(crate) backoff: BackoffQueue<K, T, C, I>,
    pub(crate) closed: bool,
    /// The scheduling cycle: how many items were popped.
    pub(crate) cycle: u64,
}

// ===== impl Parked =====

impl<K: Hash + Eq, T, I: Moment> Parked<K, T, I> {
    pub(crate) fn new() -> Self {
        Parked {
            unschedulable: Unschedulable::new(),
            move_request_cycle: None,
            next_leftover: None,
            seq: 0,
        }
    }

    /// Whether `key` is unschedulable.
    pub fn contains(&self, key: &K) -> bool {
        self.unschedulable.contains_key(key)
    }

    /// The unschedulable keys, in unspecified order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.unschedulable.keys()
    }

    /// The cycle of the last move request, if any.
    pub fn move_request_cycle(&self) -> Option<u64> {
        self.move_request_cycle
    }

    /// Records a move request (an event or an activation) in scheduling cycle `cycle`: an item
    /// popped in or before it that fails goes to backoff, not unschedulable.
    pub fn request_move(&mut self, cycle: u64) {
        self.move_request_cycle = Some(cycle);
    }

    /// When the leftover flush must next look at the unschedulable items (never late, maybe
    /// early); `None` if no item there is ever due.
    pub fn next_leftover(&self) -> Option<I> {
        self.next_leftover
    }

    /// Removes `key` and hands back its item.
    pub fn remove(&mut self, key: &K) -> Option<QueuedItem<K, T, I>> {
        self.unschedulable.remove(key)
    }

    /// The next insertion sequence number.
    pub(crate) fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        seq
    }
}

impl<K, T, I> Parked<K, T, I> {
    /// How many items are unschedulable.
    pub fn len(&self) -> usize {
        self.unschedulable.len()
    }

    /// Whether no item is unschedulable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ===== impl Ready =====

impl<K, T, C, I> Ready<K, T, C, I>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T, I>>,
    I: Moment,
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
    pub fn where_is(&self, key: &K) -> Option<SubQueue> {
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
    pub fn replace_data(&mut self, key: &K, data: T) -> Result<(), T> {
        let mut data = Some(data);
        let mut put = |item: &mut QueuedItem<K, T, I>| {
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
    pub fn active_keys(&self) -> impl Iterator<Item = &K> {
        self.active.heap.iter().map(|(k, _)| k)
    }

    /// The keys in backoff, in unspecified order.
    pub fn backoff_keys(&self) -> impl Iterator<Item = &K> {
        self.backoff.keys()
    }

    /// The earliest backoff expiry.
    pub fn next_expiry(&self) -> Option<I> {
        self.backoff.next_expiry()
    }

    /// Makes room for `active` and `backoff` more items, so a large move does not re-hash as
    /// it grows.
    pub fn reserve(&mut self, active: usize, backoff: usize) {
        self.active.reserve(active);
        self.backoff.reserve(backoff);
    }

    /// Whether `key` is in flight (popped, not yet done or handed back).
    pub fn is_in_flight(&self, key: &K) -> bool {
        self.active.in_flight.contains(key)
    }

    /// Whether `flight` is `key`'s current flight.
    pub fn is_current_flight(&self, key: &K, flight: u64) -> bool {
        self.active.in_flight.is_current(key, flight)
    }

    /// The keys in flight, in arbitrary order.
    pub fn in_flight_keys(&self) -> Vec<K> {
        self.active.in_flight.keys()
    }

    /// The in-flight list: markers and the events recorded after them, in order.
    pub fn in_flight_entries(&self) -> Vec<InFlightEntry<K>> {
        self.active.in_flight.entries()
    }

    /// Records `event` (targeted at `target`, if any) for the items in flight; nothing if none.
    pub fn record(&mut self, event: ClusterEvent, payload: EventPayload, target: Option<K>) {
        self.active.in_flight.record(event, payload, target);
    }

    /// Ends the flight of `key` (a success); false if it was not in flight.
    pub fn done(&mut self, key: &K) -> bool {
        self.active.in_flight.done(key)
    }

    /// Ends `flight` of `key` if it is still the key's current flight.
    pub fn end_flight(&mut self, key: &K, flight: u64) {
        if self.active.in_flight.is_current(key, flight) {
            self.active.in_flight.done(key);
        }
    }
}

impl<K, T, C, I> Ready<K, T, C, I> {
    /// How many keys are in flight.
    pub fn in_flight_len(&self) -> usize {
        self.active.in_flight.len()
    }

    /// How many items are in backoff.
    pub fn backoff_len(&self) -> usize {
        self.backoff.len()
    }

    /// How many items are in active.
    pub fn active_len(&self) -> usize {
        self.active.heap.len()
    }

    /// The scheduling cycle: how many items were popped.
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Whether the state is closed: nothing pops, and adds are refused.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

impl<K: Hash + Eq + Clone, T, C, I> Ready<K, T, C, I> {
    /// Closes the state and ends every flight.
    pub fn close(&mut self) {
        self.closed = true;
        self.active.in_flight.clear();
    }
}

impl<K, T, I> fmt::Debug for Parked<K, T, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parked")
            .field("unschedulable", &self.unschedulable.len())
            .field("move_request_cycle", &self.move_request_cycle)
            .finish_non_exhaustive()
    }
}

impl<K, T, C, I> fmt::Debug for Ready<K, T, C, I> {
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
