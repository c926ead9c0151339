//! The active sub-queue (a keyed heap in the caller's order) and the in-flight record.
//!
//! # In-flight events
//!
//! A popped item leaves a marker at the back of one list; every interesting event seen while
//! anything is in flight is appended after it. When the item fails, the events after its
//! marker are replayed through the hints. `done` turns the marker into a hole, then drops
//! holes and events from the head up to the first live marker: nobody can replay those. Events
//! in the middle stay for the items in flight before them.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::Arc;

use hashbrown::HashMap;
use tokio::time::Instant;

use super::event::{ClusterEvent, EventPayload};
use super::item::QueuedItem;
use ctrlq_queue_core::{Compare, KeyedHeap};

/// The active order: the caller's comparison, then the queueing sequence (FIFO among equals).
#[derive(Debug)]
pub(crate) struct ActiveOrder<C>(pub(crate) Arc<C>);

/// One entry of the in-flight list, as [`SchedulingQueue::in_flight_events`] reports it.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{InFlightEntry, SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("a", 1).unwrap();
/// let _item = queue.pop().await.unwrap();
/// assert_eq!(queue.in_flight_events(), vec![InFlightEntry::Item("a")]);
/// # }
/// ```
///
/// [`SchedulingQueue::in_flight_events`]: crate::scheduling::SchedulingQueue::in_flight_events
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InFlightEntry<K> {
    /// The marker of an item popped and not yet done.
    Item(K),
    /// An event seen while items were in flight, and the key it targets, if any.
    Event(ClusterEvent, Option<K>),
}

/// A place in the in-flight list. A marker carries no key: the key lives once, in `markers`
/// (a pop moves the heap's copy there, so it neither clones nor drops one).
#[derive(Debug)]
enum Slot<K> {
    Marker,
    Event(ClusterEvent, EventPayload, Option<K>),
    Hole,
}

/// An event recorded in flight: the event, its payload, and the key it targets, if any.
pub(crate) type RecordedEvent<K> = (ClusterEvent, EventPayload, Option<K>);

/// The in-flight list and the index of markers by key.
#[derive(Debug)]
pub(crate) struct InFlight<K> {
    slots: VecDeque<Slot<K>>,
    /// Absolute position of `slots[0]`.
    head: u64,
    /// The absolute position of each key's marker: the keys in flight.
    pub(crate) markers: HashMap<K, u64>,
}

/// The active sub-queue: a keyed heap in [`ActiveOrder`].
pub(crate) type ActiveHeap<K, T, C> = KeyedHeap<K, QueuedItem<K, T>, ActiveOrder<C>>;

// ===== impl ActiveOrder =====

impl<K, T, C: Compare<QueuedItem<K, T>>> Compare<QueuedItem<K, T>> for ActiveOrder<C> {
    fn compare(&self, a: &QueuedItem<K, T>, b: &QueuedItem<K, T>) -> Ordering {
        let ord = self.0.compare(a, b);
        debug_assert_eq!(
            ord,
            self.0.compare(b, a).reverse(),
            "the active ordering must be a strict weak order (antisymmetric)"
        );
        ord.then_with(|| a.seq.cmp(&b.seq))
    }
}

/// Inserts (or replaces) an item in `active`; the first entry sets its initial attempt time.
pub(crate) fn push<K, T, C>(
    active: &mut ActiveHeap<K, T, C>,
    mut item: QueuedItem<K, T>,
    now: Instant,
) where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    item.initial_attempt.get_or_insert(now);
    active.add(item.key.clone(), item);
}

// ===== impl InFlight =====

impl<K> InFlight<K> {
    /// Ends every flight (on close).
    pub(crate) fn clear(&mut self) {
        self.head += self.slots.len() as u64;
        self.slots.clear();
        self.markers.clear();
    }
}

impl<K: Hash + Eq + Clone> InFlight<K> {
    pub(crate) fn new() -> Self {
        InFlight {
            slots: VecDeque::new(),
            head: 0,
            markers: HashMap::new(),
        }
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.markers.contains_key(key)
    }

    /// Marks `key` in flight and returns the flight's id (its marker's position, never reused);
    /// `None` (and nothing changes) if it already is in flight.
    pub(crate) fn start(&mut self, key: K) -> Option<u64> {
        let pos = self.head + self.slots.len() as u64;
        match self.markers.entry(key) {
            hashbrown::hash_map::Entry::Occupied(_) => None,
            hashbrown::hash_map::Entry::Vacant(slot) => {
                slot.insert(pos);
                self.slots.push_back(Slot::Marker);
                Some(pos)
            }
        }
    }

    /// Whether `flight` is `key`'s current flight (a guard of an ended flight is not).
    pub(crate) fn is_current(&self, key: &K, flight: u64) -> bool {
        self.markers.get(key) == Some(&flight)
    }

    /// Records an event if anything is in flight (nobody could replay it otherwise).
    pub(crate) fn record(&mut self, event: ClusterEvent, payload: EventPayload, target: Option<K>) {
        if !self.markers.is_empty() {
            self.slots.push_back(Slot::Event(event, payload, target));
        }
    }

    /// The events recorded after `key`'s marker, or `None` if `key` is not in flight.
    pub(crate) fn events_for(&self, key: &K) -> Option<Vec<RecordedEvent<K>>> {
        let pos = *self.markers.get(key)?;
        let start = usize::try_from(pos - self.head).expect("a marker is inside the list");
        let events = self
            .slots
            .iter()
            .skip(start + 1)
            .filter_map(|s| match s {
                Slot::Event(e, p, t) => Some((*e, p.clone(), t.clone())),
                _ => None,
            })
            .collect();
        Some(events)
    }

    /// Ends `key`'s flight, then prunes the head up to the first live marker. No-op if unknown.
    pub(crate) fn done(&mut self, key: &K) -> bool {
        let Some(pos) = self.markers.remove(key) else {
            return false;
        };
        let idx = usize::try_from(pos - self.head).expect("a marker is inside the list");
        self.slots[idx] = Slot::Hole;
        while matches!(self.slots.front(), Some(Slot::Hole | Slot::Event(..))) {
            self.slots.pop_front();
            self.head += 1;
        }
        true
    }

    pub(crate) fn entries(&self) -> Vec<InFlightEntry<K>> {
        let by_position: HashMap<u64, &K> = self.markers.iter().map(|(k, &p)| (p, k)).collect();
        (self.head..)
            .zip(&self.slots)
            .filter_map(|(pos, s)| match s {
                Slot::Marker => Some(InFlightEntry::Item(by_position[&pos].clone())),
                Slot::Event(e, _, t) => Some(InFlightEntry::Event(*e, t.clone())),
                Slot::Hole => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PV_ADD: ClusterEvent = ClusterEvent::new("Pv", super::super::event::ActionType::ADD);

    #[test]
    fn done_prunes_the_head_and_keeps_the_middle() {
        let mut f = InFlight::new();
        f.record(PV_ADD, EventPayload::none(), None); // nothing in flight: dropped
        assert_eq!(f.start("p1"), Some(0));
        assert_eq!(f.start("p1"), None, "already in flight");
        assert!(f.is_current(&"p1", 0) && !f.is_current(&"p1", 1));
        f.record(PV_ADD, EventPayload::none(), None);
        f.start("p2");
        f.record(PV_ADD.with_label("n"), EventPayload::none(), None);
        f.start("p3");
        assert!(f.done(&"p2"));
        assert_eq!(f.entries().len(), 4, "a middle marker leaves its events");
        assert_eq!(f.events_for(&"p1").unwrap().len(), 2);
        assert!(f.done(&"p1"));
        assert_eq!(f.entries(), vec![InFlightEntry::Item("p3")]);
        assert!(!f.done(&"p1"), "done of an unknown key is a no-op");
        assert!(f.done(&"p3"));
        assert!(f.entries().is_empty() && f.slots.is_empty());
    }
}
