//! [`SchedulingState`]: the scheduling queue's state machine in one value, every operation one
//! call. The timed moves (backoff expiry, the leftover flush) and the moves on events are in
//! `moves`.
//!
//! # Invariants
//!
//! 1. Every queued key is in exactly one of active, backoff and unschedulable (DESIGN.md, 3).
//!    A key may additionally be in flight (popped, not yet done).
//! 2. An item inside a heap is never mutated in a way that changes its order, except through
//!    `KeyedHeap::update`, which re-sifts it (kubernetes/kubernetes#97302).
//! 3. `next_leftover` is at or before the earliest leftover deadline of the unschedulable
//!    items: it may be early, never late.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use ctrlq_queue_core::Compare;
use ctrlq_ratelimit::MAX_DELAY;
use tokio::time::Instant;

use super::active::{self, ActiveHeap, ActiveOrder, InFlight, RecordedEvent};
use super::backoff::BackoffQueue;
use super::config::{ConfigError, SchedulingQueueConfig};
use super::event::{ClusterEvent, EventPayload};
use super::hints::{Hooks, Strategy};
use super::item::{PriorityOrder, QueuedItem};
use super::pending::{Pending, SubQueue};
use super::unschedulable::Unschedulable;

/// The state machine of kube-scheduler's scheduling queue, for any keyed item: the active,
/// backoff and unschedulable sub-queues, the in-flight record with the events seen meanwhile,
/// attempts, gates and hints, and the rules that move items between them. No clock is read:
/// every operation that depends on time takes `now`.
///
/// A popped key is in flight until `in_flight` ends its flight (done, or
/// [`hand_back`](Self::hand_back)), and a key in flight is never popped again.
pub(crate) struct SchedulingState<K, T, C = PriorityOrder> {
    pub(super) config: SchedulingQueueConfig,
    pub(super) hooks: Hooks<K, T>,
    pub(super) active: ActiveHeap<K, T, C>,
    /// The keys popped and not yet done, and the events seen meanwhile.
    pub(crate) in_flight: InFlight<K>,
    pub(super) backoff: BackoffQueue<K, T, C>,
    /// Rejected or gated items, waiting for an event.
    pub(crate) unschedulable: Unschedulable<K, T>,
    /// The cycle of the last move request (event or activation); decides where an item that
    /// was not tracked in flight goes on failure.
    pub(super) move_request_cycle: Option<u64>,
    /// When the leftover flush must next look at unschedulable (invariant 3); `None` if
    /// nothing there is due ever. An early one costs one scan that moves nothing.
    pub(super) next_leftover: Option<Instant>,
    /// The last insertion's number: the last tiebreak of every order.
    seq: u64,
    /// The scheduling cycle: how many items were popped.
    pub(crate) cycle: u64,
    /// Nothing pops, and adds are refused.
    pub(crate) closed: bool,
}

/// An item popped: it, its flight id (never reused) and the scheduling cycle it was popped in.
#[derive(Debug)]
pub(crate) struct Flight<K, T> {
    /// The item, outside the state until it is done or handed back.
    pub(crate) item: QueuedItem<K, T>,
    /// The flight's id: handing the item back with it ends this flight and no later one.
    pub(crate) id: u64,
    /// The scheduling cycle the item was popped in.
    pub(crate) cycle: u64,
}

// ===== impl SchedulingState =====

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// An empty state with `config`, the hints and gates of `hooks`, the active sub-queue
    /// ordered by `order` (`Less` pops first; equal items in queueing order).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent.
    pub(crate) fn new(
        config: SchedulingQueueConfig,
        hooks: Hooks<K, T>,
        order: C,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let order = Arc::new(order);
        Ok(SchedulingState {
            config,
            hooks,
            active: ActiveHeap::new(ActiveOrder(order.clone())),
            in_flight: InFlight::new(),
            backoff: BackoffQueue::new(order),
            unschedulable: Unschedulable::new(),
            move_request_cycle: None,
            next_leftover: None,
            seq: 0,
            cycle: 0,
            closed: false,
        })
    }

    /// Queues an item: to active, unless a gate refuses it (then to unschedulable). A queued
    /// key gets the new data and timestamp, keeps its counters and goes to active; a key in
    /// flight gets a second copy, which `pop` discards while the first is in flight.
    ///
    /// # Errors
    ///
    /// The key and data, once closed.
    pub(crate) fn add(&mut self, key: K, data: T, now: Instant) -> Result<(), (K, T)> {
        if self.closed {
            return Err((key, data));
        }
        let mut item = match self.take(&key) {
            Some(mut item) => {
                item.data = data;
                item.timestamp = now;
                item
            }
            None => QueuedItem::new(key, data, now, 0),
        };
        self.seq += 1;
        item.seq = self.seq;
        self.place(item, Strategy::Immediately, now);
        Ok(())
    }

    /// Pops the head of active or, with pop-from-backoff, the rejected item whose backoff ends
    /// first when active is empty (then `now` is asked, for its initial attempt time). `None`
    /// when closed or when nothing can be popped. A stale copy of a key already in flight is
    /// discarded (kubernetes/kubernetes#118226: a second marker would leak the first).
    pub(crate) fn pop(&mut self, now: impl Fn() -> Instant) -> Option<Flight<K, T>> {
        if self.closed {
            return None;
        }
        loop {
            let (key, mut item) = match self.active.pop() {
                Some(entry) => entry,
                None if self.config.pop_from_backoff => {
                    // The rejected item whose backoff ends first, over or not (never an error),
                    // with the heap's copy of its key.
                    let (key, waiting) = self.backoff.rejected.pop()?;
                    let mut item = waiting.item;
                    item.initial_attempt.get_or_insert_with(&now);
                    (key, item)
                }
                None => return None,
            };
            // The heap's copy of the key moves into the in-flight record: no clone, no drop.
            let Some(id) = self.in_flight.start(key) else {
                continue;
            };
            item.attempts = item.attempts.saturating_add(1);
            self.cycle += 1;
            return Some(Flight {
                item,
                id,
                cycle: self.cycle,
            });
        }
    }

    /// Whether a pop would find an item now.
    pub(crate) fn can_pop(&self) -> bool {
        !self.closed
            && (!self.active.is_empty()
                || (self.config.pop_from_backoff && !self.backoff.rejected.is_empty()))
    }

    /// Takes back an item whose attempt failed, popped as flight `flight` (if from this state;
    /// only that flight ends, never a later one of the same key) in scheduling cycle `cycle`.
    ///
    /// An attempt with rejectors or pending plugins counts as unschedulable (and resets the
    /// error count); one with neither counts as an error and waits out its backoff. The events
    /// the item missed in flight are replayed through the hints; an item that was not in
    /// flight goes to backoff if a move was requested in or after `cycle`, else to
    /// unschedulable. With `only_in_flight` (a guard dropped without a verdict), an item whose
    /// flight already ended (by `done` of its key, or on close) is dropped.
    ///
    /// # Errors
    ///
    /// The item, changing nothing but the end of its flight, if its key is queued.
    pub(crate) fn hand_back(
        &mut self,
        mut item: QueuedItem<K, T>,
        flight: Option<u64>,
        cycle: u64,
        now: Instant,
        only_in_flight: bool,
    ) -> Result<(), QueuedItem<K, T>> {
        let key = &item.key;
        let current = flight.is_some_and(|f| self.in_flight.is_current(key, f));
        if !current && only_in_flight {
            return Ok(());
        }
        let missed = current.then(|| self.in_flight.events_for(key)).flatten();
        if current {
            self.in_flight.done(key);
        }
        if self.where_is(key).is_some() {
            return Err(item);
        }
        let errored = item.has_no_rejectors();
        let marks = item.marks_mut();
        if errored {
            marks.consecutive_errors = marks.consecutive_errors.saturating_add(1);
        } else {
            marks.unschedulable_count = marks.unschedulable_count.saturating_add(1);
            marks.consecutive_errors = 0;
        }
        item.timestamp = now;
        self.seq += 1;
        item.seq = self.seq;
        let strategy = if errored {
            Strategy::AfterBackoff
        } else if let Some(events) = missed {
            replay(&self.hooks, &item, &events)
        } else if self.move_request_cycle.is_some_and(|m| m >= cycle) {
            Strategy::AfterBackoff
        } else {
            Strategy::Skip
        };
        self.place(item, strategy, now);
        Ok(())
    }

    /// Moves `keys` from backoff, or from unschedulable if the gates let them in, to active at
    /// once; how many moved. A key in flight gets a `FORCE_ACTIVATE` event targeted at it and
    /// a move request, so it goes back to active if it fails.
    pub(crate) fn activate(&mut self, keys: impl IntoIterator<Item = K>, now: Instant) -> usize {
        let mut moved = 0;
        for key in keys {
            if let Some(item) = self.backoff.delete(&key) {
                active::push(&mut self.active, item, now);
                moved += 1;
            } else if let Some(item) = self.unschedulable.remove(&key) {
                moved += usize::from(self.place(item, Strategy::Immediately, now));
            } else if self.in_flight.contains(&key) {
                let (event, payload) = (ClusterEvent::FORCE_ACTIVATE, EventPayload::none());
                self.in_flight.record(event, payload, Some(key));
                self.move_request_cycle = Some(self.cycle);
            }
        }
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
        if self.in_flight.contains(&key) {
            for event in events.iter().filter(|e| self.hooks.is_of_interest(e)) {
                let (payload, target) = (EventPayload::none(), Some(key.clone()));
                self.in_flight.record(*event, payload, target);
            }
            return Some(data);
        }
        let mut data = Some(data);
        let mut put = |item: &mut QueuedItem<K, T>| item.data = data.take().expect("runs once");
        if !self.active.update(&key, &mut put) {
            self.backoff.update(&key, &mut put);
        }
        let data = data?;
        let Some(mut item) = self.unschedulable.remove(&key) else {
            return self.add(key, data, now).err().map(|(_, data)| data);
        };
        item.data = data;
        let payload = EventPayload::none();
        let strategy = events
            .iter()
            .map(|e| {
                let hints = self.hooks.hints_for(e);
                self.hooks.strategy(&hints, &item, e, &payload, Some(&key))
            })
            .find(|st| *st != Strategy::Skip)
            .unwrap_or(Strategy::Skip);
        self.place(item, strategy, now);
        None
    }

    /// Removes `key` from whichever sub-queue holds it. The in-flight record is not touched.
    pub(crate) fn take(&mut self, key: &K) -> Option<QueuedItem<K, T>> {
        let active = self.active.delete(key).map(|(_, item)| item);
        active
            .or_else(|| self.backoff.delete(key))
            .or_else(|| self.unschedulable.remove(key))
    }

    /// Inserts `item` where `strategy` sends it once the gates are asked: unschedulable for
    /// `Skip` or a refusing gate, else backoff while its backoff lasts, else active. True if
    /// it went to active.
    fn place(&mut self, mut item: QueuedItem<K, T>, strategy: Strategy, now: Instant) -> bool {
        if strategy == Strategy::Skip || self.hooks.gate_in_place(&mut item) {
            if let Some(due) = self.config.leftover_deadline(&item) {
                self.next_leftover = Some(self.next_leftover.map_or(due, |next| next.min(due)));
            }
            self.unschedulable.insert(item);
            return false;
        }
        enter(
            &mut self.active,
            &mut self.backoff,
            &self.config,
            item,
            strategy,
            now,
        )
    }
}

/// Inserts `item`, let in under `strategy` (not `Skip`), in backoff while its backoff lasts,
/// else in active; true if in active. A free function, so a move can insert while it scans
/// the unschedulable items.
pub(super) fn enter<K: Hash + Eq + Clone, T, C: Compare<QueuedItem<K, T>>>(
    active: &mut ActiveHeap<K, T, C>,
    backoff: &mut BackoffQueue<K, T, C>,
    config: &SchedulingQueueConfig,
    item: QueuedItem<K, T>,
    strategy: Strategy,
    now: Instant,
) -> bool {
    if strategy == Strategy::AfterBackoff {
        let wait = config.backoff_duration(item.backoff_count());
        // Where `timestamp + wait` does not fit in an instant, `MAX_DELAY` after it (or the
        // timestamp itself if even that does not fit): never overflows.
        let t = item.timestamp;
        let expiry = t.checked_add(wait).or_else(|| t.checked_add(MAX_DELAY));
        let expiry = expiry.unwrap_or(t);
        if expiry > now {
            backoff.push(item, expiry);
            return false;
        }
    }
    active::push(active, item, now);
    true
}

/// The strongest strategy the recorded `events` give `item` (stops at "immediately").
fn replay<K: PartialEq, T>(
    hooks: &Hooks<K, T>,
    item: &QueuedItem<K, T>,
    events: &[RecordedEvent<K>],
) -> Strategy {
    let mut best = Strategy::Skip;
    for (event, payload, target) in events {
        let hints = hooks.hints_for(event);
        best = best.max(hooks.strategy(&hints, item, event, payload, target.as_ref()));
        if best == Strategy::Immediately {
            break;
        }
    }
    best
}

// ===== reading the state =====

impl<K, T, C> SchedulingState<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// Which sub-queue holds `key`, if any.
    pub(crate) fn where_is(&self, key: &K) -> Option<SubQueue> {
        if self.active.contains_key(key) {
            Some(SubQueue::Active)
        } else if self.backoff.contains_key(key) {
            Some(SubQueue::Backoff)
        } else if self.unschedulable.contains_key(key) {
            Some(SubQueue::Unschedulable)
        } else {
            None
        }
    }

    /// The keys in each sub-queue.
    pub(crate) fn pending(&self) -> Pending<K> {
        Pending {
            active: self.active.iter().map(|(k, _)| k.clone()).collect(),
            backoff: self.backoff.keys().cloned().collect(),
            unschedulable: self.unschedulable.items().map(|i| i.key.clone()).collect(),
        }
    }
}

impl<K, T, C> SchedulingState<K, T, C> {
    /// Closes the state: nothing pops and adds are refused; every flight ends. Queued items
    /// stay.
    pub(crate) fn shut_down(&mut self) {
        self.closed = true;
        self.in_flight.clear();
    }

    /// How many items are queued in the three sub-queues.
    pub(crate) fn len(&self) -> usize {
        self.active.len() + self.backoff.len() + self.unschedulable.len()
    }

    /// The `Debug` of the state and of its queue (named `name`): its content, not its items.
    pub(crate) fn describe(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("active", &self.active.len())
            .field("backoff", &self.backoff.len())
            .field("unschedulable", &self.unschedulable.len())
            .field("in_flight", &self.in_flight.markers.len())
            .field("shutting_down", &self.closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::SchedulingState;
    use crate::scheduling::machine::{Hooks, PriorityOrder, SchedulingQueueConfig};

    /// Equal items pop in the order they were last queued: an item handed back is queued anew,
    /// after every item queued before it, whichever sub-queue it passes through on its way
    /// back to active.
    #[test]
    fn items_handed_back_together_pop_in_the_order_they_came_back() {
        let config = SchedulingQueueConfig::default();
        let mut s = SchedulingState::<&str, i64>::new(config, Hooks::new(), PriorityOrder).unwrap();
        let now = Instant::now();
        s.add("z", 0, now).unwrap();
        s.add("x", 0, now).unwrap();
        let z = s.pop(|| now).unwrap();
        let x = s.pop(|| now).unwrap();
        // Both failed with an error: each waits out its backoff, z queued first.
        s.hand_back(z.item, Some(z.id), z.cycle, now, false)
            .unwrap();
        s.hand_back(x.item, Some(x.id), x.cycle, now, false)
            .unwrap();
        // Activated in the other order, they still pop in the order they came back.
        assert_eq!(s.activate(["x"], now), 1);
        assert_eq!(s.activate(["z"], now), 1);
        let order: Vec<_> = std::iter::from_fn(|| s.pop(|| now).map(|f| f.item.key)).collect();
        assert_eq!(order, ["z", "x"]);
    }
}
