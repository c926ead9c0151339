//! [`PriorityState`]: the state machine of a priority work queue (controller-runtime's priority
//! queue), with optional aging against starvation.

use std::cmp::Ordering;
use std::fmt;
use std::hash::Hash;

use hashbrown::HashMap;

use crate::{Compare, KeyedHeap, PopOutcome};

/// Where a ready key sits in the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rank {
    priority: i32,
    /// Higher pops first: the priority, or with aging `priority · interval − enqueue time`.
    score: i128,
    /// Ties pop in the order they were queued.
    seq: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct ByRank;

impl Compare<Rank> for ByRank {
    fn compare(&self, a: &Rank, b: &Rank) -> Ordering {
        b.score.cmp(&a.score).then(a.seq.cmp(&b.seq))
    }
}

/// What [`PriorityState::add`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriorityAdd<K> {
    /// The key is now ready at this priority: one waiting getter can be woken.
    Queued,
    /// The key was ready at a lower priority: it moved to the back of its new priority.
    Raised {
        /// The priority it had.
        from: i32,
    },
    /// The key was ready at this or a higher priority: nothing changed.
    Coalesced,
    /// The key is being processed: it is queued again, at the highest priority it was added
    /// with meanwhile, when `done` is called for it. Carries whether this add made it dirty.
    Deferred {
        /// `true` if the key was not dirty before this add.
        newly_dirty: bool,
    },
    /// The state is shut down: the key is handed back.
    Refused(K),
}

/// What [`PriorityState::done`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityDone {
    /// The key is no longer being processed.
    Finished,
    /// The key had been added while processed: it is ready again at this priority.
    Requeued(i32),
    /// Ignored: the key was not being processed.
    NotProcessing,
}

/// The state of a priority work queue: ready keys ordered by priority (higher first) then by
/// the order they became ready, plus the keys being processed. No clock is read: callers pass
/// the time, in nanoseconds since any fixed origin, to the operations that enqueue.
///
/// Rules (controller-runtime's): a key is ready, processing, or both (processing and *dirty*:
/// re-added meanwhile); a ready key keeps the highest priority it was added with, and a raise
/// moves it to the back of its new priority; priority never drops; a processing key is never
/// handed out again until `done`.
///
/// **Aging** (off by default) keeps low priorities from starving: with an interval `I`, a key
/// that has been ready for `d` ranks as if its priority were `priority + d / I`. Because every
/// ready key ages at the same rate, this is the fixed score `priority · I − enqueue time`, so the
/// heap order never has to be revisited: O(log n) per operation as without aging.
///
/// # Examples
///
/// ```
/// use queue_core::{PopOutcome, PriorityAdd, PriorityState};
///
/// let mut state = PriorityState::new(None);
/// state.add("resync", 0, 0);
/// state.add("user-change", 10, 1);
/// assert_eq!(state.add("resync", 5, 2), PriorityAdd::Raised { from: 0 });
/// assert_eq!(state.pop(), PopOutcome::Item(("user-change", 10)));
/// assert_eq!(state.pop(), PopOutcome::Item(("resync", 5)));
/// ```
pub struct PriorityState<K> {
    ready: KeyedHeap<K, Rank, ByRank>,
    /// Processing keys, with the rank to queue them at after `done` if re-added meanwhile (its
    /// place is where it was re-added, as controller-runtime's).
    processing: HashMap<K, Option<Rank>>,
    seq: u64,
    aging_nanos: Option<u64>,
    shut_down: bool,
}

impl<K> fmt::Debug for PriorityState<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityState")
            .field("ready", &self.ready.len())
            .field("processing", &self.processing.len())
            .field("aging_nanos", &self.aging_nanos)
            .field("shut_down", &self.shut_down)
            .finish()
    }
}

impl<K: Hash + Eq + Clone> PriorityState<K> {
    /// An empty, open state; `aging_nanos` is the aging interval (see the type), `None` for none
    /// (a zero interval also means none).
    ///
    /// # Examples
    ///
    /// ```
    /// let state = queue_core::PriorityState::<u32>::new(Some(1_000_000_000));
    /// assert!(state.is_idle());
    /// ```
    pub fn new(aging_nanos: Option<u64>) -> Self {
        Self {
            ready: KeyedHeap::new(ByRank),
            processing: HashMap::new(),
            seq: 0,
            aging_nanos: aging_nanos.filter(|&n| n > 0),
            shut_down: false,
        }
    }

    fn rank(&mut self, priority: i32, now_nanos: u64) -> Rank {
        self.seq += 1;
        let score = match self.aging_nanos {
            None => i128::from(priority),
            Some(interval) => i128::from(priority) * i128::from(interval) - i128::from(now_nanos),
        };
        Rank {
            priority,
            score,
            seq: self.seq,
        }
    }

    /// Adds `key` at `priority` at time `now_nanos`; see [`PriorityAdd`] for what can happen.
    ///
    /// # Examples
    ///
    /// ```
    /// use queue_core::{PriorityAdd, PriorityState};
    /// let mut state = PriorityState::new(None);
    /// assert_eq!(state.add("a", 1, 0), PriorityAdd::Queued);
    /// assert_eq!(state.add("a", 0, 0), PriorityAdd::Coalesced); // never lowered
    /// ```
    pub fn add(&mut self, key: K, priority: i32, now_nanos: u64) -> PriorityAdd<K> {
        if self.shut_down {
            return PriorityAdd::Refused(key);
        }
        if let Some(outcome) = self.add_present(&key, priority, now_nanos) {
            return outcome;
        }
        let rank = self.rank(priority, now_nanos);
        self.ready.add(key, rank);
        PriorityAdd::Queued
    }

    /// [`add`](Self::add) by reference: the key is cloned only if it is queued (or handed back
    /// refused).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use queue_core::{PriorityAdd, PriorityState};
    ///
    /// let key: Arc<str> = Arc::from("ns/a");
    /// let mut state = PriorityState::new(None);
    /// assert_eq!(state.add_ref(&key, 1, 0), PriorityAdd::Queued);
    /// assert_eq!(state.add_ref(&key, 1, 0), PriorityAdd::Coalesced);
    /// assert_eq!(Arc::strong_count(&key), 2, "one clone, in the queue");
    /// ```
    pub fn add_ref(&mut self, key: &K, priority: i32, now_nanos: u64) -> PriorityAdd<K> {
        if self.shut_down {
            return PriorityAdd::Refused(key.clone());
        }
        if let Some(outcome) = self.add_present(key, priority, now_nanos) {
            return outcome;
        }
        let rank = self.rank(priority, now_nanos);
        self.ready.add(key.clone(), rank);
        PriorityAdd::Queued
    }

    /// The outcome of adding a key that is processing or ready; `None` if it is neither.
    fn add_present(&mut self, key: &K, priority: i32, now_nanos: u64) -> Option<PriorityAdd<K>> {
        if let Some(dirty) = self.processing.get(key).copied() {
            let newly_dirty = dirty.is_none();
            if dirty.is_none_or(|r| priority > r.priority) {
                let rank = self.rank(priority, now_nanos);
                if let Some(slot) = self.processing.get_mut(key) {
                    *slot = Some(rank);
                }
            }
            return Some(PriorityAdd::Deferred { newly_dirty });
        }
        let current = self.ready.get(key)?.priority;
        if priority <= current {
            return Some(PriorityAdd::Coalesced);
        }
        let rank = self.rank(priority, now_nanos);
        self.ready.update(key, |r| *r = rank);
        Some(PriorityAdd::Raised { from: current })
    }

    /// Hands out the best ready key with its priority; it is processing until [`done`](Self::done).
    ///
    /// # Examples
    ///
    /// ```
    /// use queue_core::{PopOutcome, PriorityState};
    /// let mut state = PriorityState::new(None);
    /// assert_eq!(state.pop(), PopOutcome::<(&str, i32)>::Empty);
    /// state.add("a", 0, 0);
    /// assert_eq!(state.pop(), PopOutcome::Item(("a", 0)));
    /// ```
    pub fn pop(&mut self) -> PopOutcome<(K, i32)> {
        match self.ready.pop() {
            Some((key, rank)) => {
                self.processing.insert(key.clone(), None);
                PopOutcome::Item((key, rank.priority))
            }
            None if self.shut_down => PopOutcome::ShutDown,
            None => PopOutcome::Empty,
        }
    }

    /// Ends the processing of `key`; a key re-added meanwhile is ready again, placed where it was
    /// re-added (`now_nanos` is unused and kept for symmetry with `add`).
    ///
    /// # Examples
    ///
    /// ```
    /// use queue_core::{PriorityDone, PriorityState};
    /// let mut state = PriorityState::new(None);
    /// state.add("a", 0, 0);
    /// state.pop();
    /// state.add("a", 3, 1);
    /// assert_eq!(state.done(&"a", 2), PriorityDone::Requeued(3));
    /// ```
    pub fn done(&mut self, key: &K, now_nanos: u64) -> PriorityDone {
        let _ = now_nanos;
        match self.processing.remove_entry(key) {
            None => PriorityDone::NotProcessing,
            Some((_, None)) => PriorityDone::Finished,
            Some((key, Some(rank))) => {
                self.ready.add(key, rank);
                PriorityDone::Requeued(rank.priority)
            }
        }
    }

    /// The priority of a ready key.
    pub fn ready_priority(&self, key: &K) -> Option<i32> {
        self.ready.get(key).map(|r| r.priority)
    }

    /// Refuses adds from now on; ready keys can still be popped. Returns whether this call did it.
    pub fn shut_down(&mut self) -> bool {
        !std::mem::replace(&mut self.shut_down, true)
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Ready keys (not counting processing ones).
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// Keys being processed.
    pub fn processing_len(&self) -> usize {
        self.processing.len()
    }

    /// Nothing ready and nothing processing.
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty() && self.processing.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop_all(s: &mut PriorityState<&'static str>) -> Vec<(&'static str, i32)> {
        let mut out = Vec::new();
        while let PopOutcome::Item(x) = s.pop() {
            out.push(x);
        }
        out
    }

    #[test]
    fn higher_first_then_fifo() {
        let mut s = PriorityState::new(None);
        for (k, p) in [("a", 0), ("b", 1), ("c", 0), ("d", 1)] {
            assert_eq!(s.add(k, p, 0), PriorityAdd::Queued);
        }
        assert_eq!(pop_all(&mut s), [("b", 1), ("d", 1), ("a", 0), ("c", 0)]);
    }

    #[test]
    fn a_raise_goes_to_the_back_of_its_new_level_and_never_drops() {
        let mut s = PriorityState::new(None);
        s.add("x", 5, 0);
        s.add("a", 0, 0);
        assert_eq!(s.add("a", 5, 0), PriorityAdd::Raised { from: 0 });
        assert_eq!(s.add("a", 1, 0), PriorityAdd::Coalesced);
        assert_eq!(pop_all(&mut s), [("x", 5), ("a", 5)]);
    }

    #[test]
    fn processing_keys_are_deferred_at_their_highest_priority() {
        let mut s = PriorityState::new(None);
        s.add("a", 0, 0);
        assert_eq!(s.pop(), PopOutcome::Item(("a", 0)));
        assert_eq!(
            s.add("a", 2, 0),
            PriorityAdd::Deferred { newly_dirty: true }
        );
        assert_eq!(
            s.add("a", 1, 0),
            PriorityAdd::Deferred { newly_dirty: false }
        );
        assert_eq!(s.pop(), PopOutcome::Empty, "never handed out twice");
        assert_eq!(s.done(&"a", 0), PriorityDone::Requeued(2));
        assert_eq!(s.done(&"a", 0), PriorityDone::NotProcessing);
        assert_eq!(pop_all(&mut s), [("a", 2)]);
        assert_eq!(s.done(&"a", 0), PriorityDone::Finished);
        assert!(s.is_idle());
    }

    #[test]
    fn aging_serves_an_old_low_priority_key_before_new_high_ones() {
        // Interval 1 s: a key waiting 10 s counts as 10 priorities higher.
        let sec = 1_000_000_000;
        let mut s = PriorityState::new(Some(sec));
        s.add("old-low", 0, 0);
        s.add("new-high", 5, 6 * sec); // effectively 5 - 6 = -1 vs 0 - 0 = 0
        assert_eq!(s.pop(), PopOutcome::Item(("old-low", 0)));
        assert_eq!(s.done(&"old-low", 7 * sec), PriorityDone::Finished);
        s.add("old-low", 0, 7 * sec);
        s.add("newer-high", 5, 4 * sec); // 5 - 4 = 1 > 0 - 7 = -7
        assert_eq!(
            pop_all(&mut s),
            [("newer-high", 5), ("new-high", 5), ("old-low", 0)]
        );
    }

    #[test]
    fn shut_down_refuses_adds_and_drains() {
        let mut s = PriorityState::new(None);
        s.add("a", 0, 0);
        assert!(s.shut_down());
        assert!(!s.shut_down());
        assert_eq!(s.add("b", 0, 0), PriorityAdd::Refused("b"));
        assert_eq!(s.pop(), PopOutcome::Item(("a", 0)));
        assert_eq!(s.pop(), PopOutcome::ShutDown);
    }
}
