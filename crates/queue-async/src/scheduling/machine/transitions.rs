//! The transitions of [`SchedulingRules`] over the two halves: inserting placed items, taking
//! and popping them, taking failed items back, and the moves (on events, on activation, at
//! the backoff and leftover deadlines).

use std::hash::Hash;
use tokio::time::Instant;

use super::active::RecordedEvent;
use super::event::{ClusterEvent, EventPayload};
use super::hints::{Hooks, Strategy};
use super::item::QueuedItem;
use super::parts::{Parked, Ready};
use super::rules::{Flight, Placement, Return, Returned, SchedulingRules, Wake};
use ctrlq_queue_core::Compare;

impl<K, T> SchedulingRules<K, T>
where
    K: Hash + Eq + Clone,
{
    /// Inserts a placed item: an unschedulable one into `parked`, the others into `ready`.
    pub(crate) fn commit<C: Compare<QueuedItem<K, T>>>(
        &self,
        parked: &mut Parked<K, T>,
        ready: &mut Ready<K, T, C>,
        placement: Placement<K, T>,
        now: Instant,
    ) -> Wake {
        match placement {
            Placement::Unschedulable(item) => self.park(parked, item),
            other => self.commit_ready(ready, other, now).unwrap_or_default(),
        }
    }

    /// Inserts an active or backoff placement into `ready`, without `parked`.
    ///
    /// # Errors
    ///
    /// An unschedulable placement is handed back: it belongs in [`Parked`] (see
    /// [`commit`](Self::commit)).
    pub(crate) fn commit_ready<C: Compare<QueuedItem<K, T>>>(
        &self,
        ready: &mut Ready<K, T, C>,
        placement: Placement<K, T>,
        now: Instant,
    ) -> Result<Wake, QueuedItem<K, T>> {
        match placement {
            Placement::Active(item) => {
                ready.active.push(item, now);
                Ok(Wake {
                    pop: true,
                    ..Wake::default()
                })
            }
            Placement::Backoff(item, expiry) => Ok(Wake {
                timer: ready.backoff.push(item, expiry),
                pop: self.config.pop_from_backoff,
                flush: true,
            }),
            Placement::Unschedulable(item) => Err(item),
        }
    }

    /// Inserts an unschedulable item, moving the next leftover deadline earlier if it is.
    fn park(&self, parked: &mut Parked<K, T>, item: QueuedItem<K, T>) -> Wake {
        let mut wake = Wake {
            flush: true,
            ..Wake::default()
        };
        if let Some(due) = self.leftover_deadline(&item)
            && parked.next_leftover.is_none_or(|next| due < next)
        {
            parked.next_leftover = Some(due);
            wake.timer = true;
        }
        parked.unschedulable.insert(item);
        wake
    }

    /// Removes `key` from whichever sub-queue holds it. The in-flight record is not touched.
    pub(crate) fn take<C: Compare<QueuedItem<K, T>>>(
        &self,
        parked: &mut Parked<K, T>,
        ready: &mut Ready<K, T, C>,
        key: &K,
    ) -> Option<QueuedItem<K, T>> {
        if let Some((_, item)) = ready.active.heap.delete(key) {
            return Some(item);
        }
        if let Some(item) = ready.backoff.delete(key) {
            return Some(item);
        }
        parked.unschedulable.remove(key)
    }

    /// Pops the head of active or, with pop-from-backoff, the rejected item whose backoff ends
    /// first when active is empty (then `now` is asked, for its initial attempt time). `None`
    /// when closed or when nothing can be popped. A stale copy of a key already in flight is
    /// discarded (kubernetes/kubernetes#118226: a second marker would leak the first).
    pub(crate) fn pop<C: Compare<QueuedItem<K, T>>>(
        &self,
        ready: &mut Ready<K, T, C>,
        now: impl Fn() -> Instant,
    ) -> Option<Flight<K, T>> {
        if ready.closed {
            return None;
        }
        loop {
            let (key, mut item) = match ready.active.heap.pop() {
                Some(entry) => entry,
                None if self.config.pop_from_backoff => {
                    let (key, mut item) = ready.backoff.pop_rejected()?;
                    item.enter_active(now());
                    (key, item)
                }
                None => return None,
            };
            // The heap's copy of the key moves into the in-flight record: no clone, no drop.
            let Some(id) = ready.active.in_flight.start(key) else {
                continue;
            };
            item.attempts = item.attempts.saturating_add(1);
            ready.cycle += 1;
            return Some(Flight {
                item,
                id,
                cycle: ready.cycle,
            });
        }
    }

    /// The first step of taking back an item whose attempt failed: ends its flight `flight`
    /// (if that is still the key's current flight; `None`: popped elsewhere) and collects the
    /// events it missed. With `only_in_flight` (a guard dropped without a verdict), an item
    /// whose flight already ended is not taken back.
    pub(crate) fn claim_return<C: Compare<QueuedItem<K, T>>>(
        &self,
        parked: &Parked<K, T>,
        ready: &mut Ready<K, T, C>,
        item: QueuedItem<K, T>,
        flight: Option<u64>,
        only_in_flight: bool,
    ) -> Return<K, T> {
        let key = &item.key;
        let current = flight.is_some_and(|f| ready.active.in_flight.is_current(key, f));
        if !current && only_in_flight {
            return Return::Ended;
        }
        let missed = if current {
            let events = ready.active.in_flight.events_for(key);
            ready.active.in_flight.done(key);
            events
        } else {
            None
        };
        if ready.active.heap.contains_key(key)
            || ready.backoff.contains_key(key)
            || parked.unschedulable.contains_key(key)
        {
            return Return::AlreadyQueued(item);
        }
        Return::Accepted(Returned::new(item, missed))
    }

    /// Where an item taken back goes, popped in scheduling cycle `cycle`. An attempt with
    /// rejectors or pending plugins counts as unschedulable (and resets the error count); one
    /// with neither counts as an error and waits out its backoff. The missed events are
    /// replayed through the hints; an item that was not in flight goes to backoff if a move
    /// was requested in or after `cycle`, else to unschedulable.
    pub(crate) fn requeue(
        &self,
        parked: &mut Parked<K, T>,
        returned: Returned<K, T>,
        cycle: u64,
        now: Instant,
    ) -> Placement<K, T> {
        let (mut item, missed) = returned.into_parts();
        let errored = item.has_no_rejectors();
        let marks = item.marks_mut();
        if errored {
            marks.consecutive_errors = marks.consecutive_errors.saturating_add(1);
        } else {
            marks.unschedulable_count = marks.unschedulable_count.saturating_add(1);
            marks.consecutive_errors = 0;
        }
        item.set_timestamp(now);
        item.seq = parked.next_seq();
        let strategy = if errored {
            Strategy::AfterBackoff
        } else if let Some(events) = missed {
            replay(&self.hooks, &item, &events)
        } else if parked.move_request_cycle.is_some_and(|m| m >= cycle) {
            Strategy::AfterBackoff
        } else {
            Strategy::Skip
        };
        self.prepare(item, strategy, now, true)
    }

    /// Moves `key` to active at once: from backoff, or from unschedulable if the gates let it
    /// in. A key in flight gets a `FORCE_ACTIVATE` event targeted at it and a move request in
    /// `cycle`, so it goes back to active if it fails. Returns whether it moved.
    pub(crate) fn activate<C: Compare<QueuedItem<K, T>>>(
        &self,
        parked: &mut Parked<K, T>,
        ready: &mut Ready<K, T, C>,
        key: K,
        cycle: u64,
        now: Instant,
        wake: &mut Wake,
    ) -> bool {
        if let Some(item) = ready.backoff.delete(&key) {
            *wake |= self.commit(parked, ready, Placement::Active(item), now);
            true
        } else if let Some(item) = parked.unschedulable.remove(&key) {
            let placement = self.admit(item, now);
            let moved = matches!(placement, Placement::Active(_));
            *wake |= self.commit(parked, ready, placement, now);
            moved
        } else {
            if ready.active.in_flight.contains(&key) {
                let event = ClusterEvent::FORCE_ACTIVATE;
                ready
                    .active
                    .in_flight
                    .record(event, EventPayload::none(), Some(key));
                parked.move_request_cycle = Some(cycle);
            }
            false
        }
    }

    /// Replaces the data of `key` where `ready` holds it: in flight, the `events` are recorded
    /// for it and `Ok(Some(data))` hands the data back (the state holds no copy); in active or
    /// backoff it is replaced in place (`Ok(None)`).
    ///
    /// # Errors
    ///
    /// The key and data, if `ready` does not hold the key (see
    /// [`update_parked`](Self::update_parked)).
    pub(crate) fn update_ready<C: Compare<QueuedItem<K, T>>>(
        &self,
        ready: &mut Ready<K, T, C>,
        key: K,
        data: T,
        events: &[ClusterEvent],
    ) -> Result<Option<T>, (K, T)> {
        if ready.active.in_flight.contains(&key) {
            for event in events.iter().filter(|e| self.hooks.is_of_interest(e)) {
                let payload = EventPayload::none();
                ready
                    .active
                    .in_flight
                    .record(*event, payload, Some(key.clone()));
            }
            return Ok(Some(data));
        }
        match ready.replace_data(&key, data) {
            Ok(()) => Ok(None),
            Err(data) => Err((key, data)),
        }
    }

    /// Replaces the data of an unschedulable `key` and judges `events` as a move targeted at
    /// it would: where it goes now ([`commit`](Self::commit) it).
    ///
    /// # Errors
    ///
    /// The key and data, if `key` is not unschedulable.
    pub(crate) fn update_parked(
        &self,
        parked: &mut Parked<K, T>,
        key: K,
        data: T,
        events: &[ClusterEvent],
        now: Instant,
    ) -> Result<Placement<K, T>, (K, T)> {
        let Some(mut item) = parked.unschedulable.remove(&key) else {
            return Err((key, data));
        };
        item.data = data;
        let payload = EventPayload::none();
        let strategy = events
            .iter()
            .map(|e| self.hooks.strategy(&item, e, &payload, Some(&key)))
            .find(|st| *st != Strategy::Skip)
            .unwrap_or(Strategy::Skip);
        Ok(self.prepare(item, strategy, now, true))
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
