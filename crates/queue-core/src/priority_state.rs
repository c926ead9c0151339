//! [`PriorityState`]: the state machine of a priority work queue (controller-runtime's priority
//! queue), with optional aging against starvation.

use std::cmp::Ordering;
use std::fmt;
use std::hash::Hash;

use hashbrown::HashMap;

use crate::{AddOutcome, Compare, DoneOutcome, KeyedHeap, PopOutcome};

/// Where a ready key sits in the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rank {
    priority: i32,
    /// When the key became dirty (ready, or re-added while processing): its age under aging
    /// counts from here, and a raise keeps it.
    since: u64,
    /// Higher pops first: the priority, or with aging `priority · interval − since`.
    score: i128,
    /// Ties pop in the order they were queued or last raised.
    seq: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct ByRank;

impl Compare<Rank> for ByRank {
    fn compare(&self, a: &Rank, b: &Rank) -> Ordering {
        b.score.cmp(&a.score).then(a.seq.cmp(&b.seq))
    }
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
/// heap order never has to be revisited: O(log n) per operation as without aging. A raise keeps
/// the enqueue time (`d` counts from the add that made the key ready, or, for a key re-added
/// while processing, from that re-add), so raising a key never makes it wait longer.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{AddOutcome, PopOutcome, PriorityState};
///
/// let mut state = PriorityState::new(None);
/// state.add("resync", 0, 0);
/// state.add("user-change", 10, 1);
/// assert_eq!(state.add("resync", 5, 2), AddOutcome::Raised { from: 0 });
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
    /// let state = ctrlq_queue_core::PriorityState::<u32>::new(Some(1_000_000_000));
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

    /// The rank of a key at `priority`, dirty since `since`, queued or raised now.
    fn rank(&mut self, priority: i32, since: u64) -> Rank {
        self.seq += 1;
        let score = match self.aging_nanos {
            None => i128::from(priority),
            Some(interval) => i128::from(priority) * i128::from(interval) - i128::from(since),
        };
        Rank {
            priority,
            since,
            score,
            seq: self.seq,
        }
    }

    /// Adds `key` at `priority` at time `now_nanos`; see [`AddOutcome`] for what can happen.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{AddOutcome, PriorityState};
    /// let mut state = PriorityState::new(None);
    /// assert_eq!(state.add("a", 1, 0), AddOutcome::Queued);
    /// assert_eq!(state.add("a", 0, 0), AddOutcome::Coalesced); // never lowered
    /// ```
    pub fn add(&mut self, key: K, priority: i32, now_nanos: u64) -> AddOutcome<K> {
        if self.shut_down {
            return AddOutcome::ShutDown(key);
        }
        if let Some(outcome) = self.add_present(&key, priority, now_nanos) {
            return outcome;
        }
        let rank = self.rank(priority, now_nanos);
        self.ready.add(key, rank);
        AddOutcome::Queued
    }

    /// The outcome of adding a key that is processing or ready; `None` if it is neither.
    fn add_present(&mut self, key: &K, priority: i32, now_nanos: u64) -> Option<AddOutcome<K>> {
        if let Some(dirty) = self.processing.get(key).copied() {
            let outcome = match dirty {
                None => {
                    let rank = self.rank(priority, now_nanos);
                    Some((rank, AddOutcome::Deferred { newly_dirty: true }))
                }
                Some(old) if priority > old.priority => {
                    let rank = self.rank(priority, old.since);
                    Some((rank, AddOutcome::Raised { from: old.priority }))
                }
                Some(_) => None,
            };
            let Some((rank, outcome)) = outcome else {
                return Some(AddOutcome::Deferred { newly_dirty: false });
            };
            if let Some(slot) = self.processing.get_mut(key) {
                *slot = Some(rank);
            }
            return Some(outcome);
        }
        let current = *self.ready.get(key)?;
        if priority <= current.priority {
            return Some(AddOutcome::Coalesced);
        }
        let rank = self.rank(priority, current.since);
        self.ready.update(key, |r| *r = rank);
        Some(AddOutcome::Raised {
            from: current.priority,
        })
    }

    /// Hands out the best ready key with its priority; it is processing until [`done`](Self::done).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{PopOutcome, PriorityState};
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
    /// use ctrlq_queue_core::{DoneOutcome, PriorityState};
    /// let mut state = PriorityState::new(None);
    /// state.add("a", 0, 0);
    /// state.pop();
    /// state.add("a", 3, 1);
    /// assert_eq!(state.done(&"a", 2), DoneOutcome::Requeued(3));
    /// ```
    pub fn done(&mut self, key: &K, now_nanos: u64) -> DoneOutcome<i32> {
        let _ = now_nanos;
        match self.processing.remove_entry(key) {
            None => DoneOutcome::NotProcessing,
            Some((_, None)) => DoneOutcome::Finished,
            Some((key, Some(rank))) => {
                self.ready.add(key, rank);
                DoneOutcome::Requeued(rank.priority)
            }
        }
    }

    /// The priority of a ready key.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::PriorityState::new(None);
    /// state.add("a", 2, 0);
    /// assert_eq!(state.ready_priority(&"a"), Some(2));
    /// assert_eq!(state.ready_priority(&"b"), None);
    /// ```
    pub fn ready_priority(&self, key: &K) -> Option<i32> {
        self.ready.get(key).map(|r| r.priority)
    }

    /// Whether `key` is dirty: ready, or being processed and re-added meanwhile (so it will be
    /// handed out again without another add).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::PriorityState::new(None);
    /// state.add("a", 0, 0);
    /// assert!(state.is_dirty(&"a"));
    /// state.pop();
    /// assert!(!state.is_dirty(&"a")); // processing only
    /// state.add("a", 0, 1);
    /// assert!(state.is_dirty(&"a")); // processing and re-added
    /// ```
    pub fn is_dirty(&self, key: &K) -> bool {
        self.ready.get(key).is_some() || matches!(self.processing.get(key), Some(Some(_)))
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

    /// Whether `key` is being processed (handed out and not done).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::PriorityState::new(None);
    /// state.add("a", 0, 0);
    /// state.pop();
    /// assert!(state.is_processing(&"a"));
    /// ```
    pub fn is_processing(&self, key: &K) -> bool {
        self.processing.contains_key(key)
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
            assert_eq!(s.add(k, p, 0), AddOutcome::Queued);
        }
        assert_eq!(pop_all(&mut s), [("b", 1), ("d", 1), ("a", 0), ("c", 0)]);
    }

    #[test]
    fn a_raise_goes_to_the_back_of_its_new_level_and_never_drops() {
        let mut s = PriorityState::new(None);
        s.add("x", 5, 0);
        s.add("a", 0, 0);
        assert_eq!(s.add("a", 5, 0), AddOutcome::Raised { from: 0 });
        assert_eq!(s.add("a", 1, 0), AddOutcome::Coalesced);
        assert_eq!(pop_all(&mut s), [("x", 5), ("a", 5)]);
    }

    #[test]
    fn processing_keys_are_deferred_at_their_highest_priority() {
        let mut s = PriorityState::new(None);
        s.add("a", 0, 0);
        assert_eq!(s.pop(), PopOutcome::Item(("a", 0)));
        assert_eq!(s.add("a", 2, 0), AddOutcome::Deferred { newly_dirty: true });
        assert_eq!(
            s.add("a", 1, 0),
            AddOutcome::Deferred { newly_dirty: false }
        );
        assert_eq!(s.pop(), PopOutcome::Empty, "never handed out twice");
        assert_eq!(s.done(&"a", 0), DoneOutcome::Requeued(2));
        assert_eq!(s.done(&"a", 0), DoneOutcome::NotProcessing);
        assert_eq!(pop_all(&mut s), [("a", 2)]);
        assert_eq!(s.done(&"a", 0), DoneOutcome::Finished);
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
        assert_eq!(s.done(&"old-low", 7 * sec), DoneOutcome::Finished);
        s.add("old-low", 0, 7 * sec);
        s.add("newer-high", 5, 4 * sec); // 5 - 4 = 1 > 0 - 7 = -7
        assert_eq!(
            pop_all(&mut s),
            [("newer-high", 5), ("new-high", 5), ("old-low", 0)]
        );
    }

    #[test]
    fn a_raise_keeps_the_age_of_the_first_add() {
        // Interval 100 ms: `old` ready 900 ms at priority 0, raised to 1, ranks 1 + 9 = 10;
        // `fresh` at 5 ranks 5.
        let ms = 1_000_000;
        let mut s = PriorityState::new(Some(100 * ms));
        s.add("old", 0, 0);
        assert_eq!(s.add("old", 1, 900 * ms), AddOutcome::Raised { from: 0 });
        s.add("fresh", 5, 900 * ms);
        assert_eq!(pop_all(&mut s), [("old", 1), ("fresh", 5)]);
    }

    #[test]
    fn a_dirty_processing_key_raised_keeps_its_re_add_age() {
        let ms = 1_000_000;
        let mut s = PriorityState::new(Some(100 * ms));
        s.add("k", 0, 0);
        assert_eq!(s.pop(), PopOutcome::Item(("k", 0)));
        assert_eq!(
            s.add("k", 0, 100 * ms),
            AddOutcome::Deferred { newly_dirty: true }
        );
        // Raised while processing: reported as a raise (the depth moves), age from the re-add.
        assert_eq!(s.add("k", 1, 1000 * ms), AddOutcome::Raised { from: 0 });
        assert_eq!(
            s.add("k", 1, 1000 * ms),
            AddOutcome::Deferred { newly_dirty: false }
        );
        assert_eq!(s.done(&"k", 1000 * ms), DoneOutcome::Requeued(1));
        s.add("fresh", 5, 1000 * ms); // 5 against 1 + 9
        assert_eq!(pop_all(&mut s), [("k", 1), ("fresh", 5)]);
    }

    #[test]
    fn dirty_means_ready_or_re_added_while_processing() {
        let mut s = PriorityState::new(None);
        assert!(!s.is_dirty(&"a"));
        s.add("a", 0, 0);
        assert!(s.is_dirty(&"a"));
        s.pop();
        assert!(!s.is_dirty(&"a"));
        s.add("a", 0, 0);
        assert!(s.is_dirty(&"a"));
        s.done(&"a", 0);
        assert!(s.is_dirty(&"a"));
        s.pop();
        s.done(&"a", 0);
        assert!(!s.is_dirty(&"a"));
    }

    #[test]
    fn shut_down_refuses_adds_and_drains() {
        let mut s = PriorityState::new(None);
        s.add("a", 0, 0);
        assert!(!s.is_shut_down());
        assert!(s.shut_down());
        assert!(s.is_shut_down());
        assert!(!s.shut_down());
        assert_eq!(
            format!("{s:?}"),
            "PriorityState { ready: 1, processing: 0, aging_nanos: None, shut_down: true }"
        );
        assert_eq!(s.add("b", 0, 0), AddOutcome::ShutDown("b"));
        assert_eq!(s.pop(), PopOutcome::Item(("a", 0)));
        assert_eq!(s.pop(), PopOutcome::ShutDown);
    }

    mod model {
        //! The state against a naive model: a list of entries ranked by
        //! `priority · interval − since` (or the priority), ties by the order of their last
        //! queue or raise; seeded, persisted failures replayed first.

        use proptest::prelude::*;
        use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

        use super::super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Add(u8, i8),
            Pop,
            Done(u8),
            Advance(u8),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                5 => (0u8..6, -2i8..4).prop_map(|(k, p)| Op::Add(k, p)),
                3 => Just(Op::Pop),
                2 => (0u8..6).prop_map(Op::Done),
                2 => (0u8..20).prop_map(Op::Advance),
            ]
        }

        /// One dirty key of the model: priority, dirty since, order of its last queue/raise.
        #[derive(Debug, Clone, Copy)]
        struct Entry {
            p: i32,
            since: u64,
            seq: u64,
        }

        struct Model {
            ready: Vec<(u8, Entry)>,
            processing: Vec<(u8, Option<Entry>)>,
            seq: u64,
        }

        impl Model {
            fn score(e: &Entry, interval: Option<u64>) -> i128 {
                match interval {
                    None => i128::from(e.p),
                    Some(i) => i128::from(e.p) * i128::from(i) - i128::from(e.since),
                }
            }

            fn add(&mut self, k: u8, p: i32, now: u64) {
                self.seq += 1;
                let seq = self.seq;
                if let Some((_, dirty)) = self.processing.iter_mut().find(|(x, _)| *x == k) {
                    match dirty {
                        None => *dirty = Some(Entry { p, since: now, seq }),
                        Some(e) if p > e.p => {
                            *e = Entry {
                                p,
                                since: e.since,
                                seq,
                            }
                        }
                        Some(_) => {}
                    }
                } else if let Some((_, e)) = self.ready.iter_mut().find(|(x, _)| *x == k) {
                    if p > e.p {
                        *e = Entry {
                            p,
                            since: e.since,
                            seq,
                        };
                    }
                } else {
                    self.ready.push((k, Entry { p, since: now, seq }));
                }
            }

            fn pop(&mut self, interval: Option<u64>) -> Option<(u8, i32)> {
                let best = (0..self.ready.len()).max_by(|&a, &b| {
                    let (ea, eb) = (&self.ready[a].1, &self.ready[b].1);
                    Self::score(ea, interval)
                        .cmp(&Self::score(eb, interval))
                        .then(eb.seq.cmp(&ea.seq))
                })?;
                let (k, e) = self.ready.remove(best);
                self.processing.push((k, None));
                Some((k, e.p))
            }

            fn done(&mut self, k: u8) {
                if let Some(i) = self.processing.iter().position(|(x, _)| *x == k)
                    && let (k, Some(e)) = self.processing.remove(i)
                {
                    self.ready.push((k, e));
                }
            }
        }

        fn run(interval: Option<u64>, ops: &[Op]) -> Result<(), TestCaseError> {
            let mut state = PriorityState::new(interval);
            let mut model = Model {
                ready: Vec::new(),
                processing: Vec::new(),
                seq: 0,
            };
            let mut now = 0u64;
            for op in ops {
                match *op {
                    Op::Add(k, p) => {
                        let refused =
                            matches!(state.add(k, i32::from(p), now), AddOutcome::ShutDown(_));
                        prop_assert!(!refused);
                        model.add(k, i32::from(p), now);
                    }
                    Op::Pop => {
                        let got = match state.pop() {
                            PopOutcome::Item(x) => Some(x),
                            _ => None,
                        };
                        prop_assert_eq!(got, model.pop(interval));
                    }
                    Op::Done(k) => {
                        state.done(&k, now);
                        model.done(k);
                    }
                    Op::Advance(d) => now += u64::from(d) * 10,
                }
                prop_assert_eq!(state.len(), model.ready.len());
                prop_assert_eq!(state.is_empty(), model.ready.is_empty());
                prop_assert_eq!(state.processing_len(), model.processing.len());
                prop_assert_eq!(
                    state.is_idle(),
                    model.ready.is_empty() && model.processing.is_empty()
                );
                for k in 0..6 {
                    let ready = model.ready.iter().find(|(x, _)| *x == k).map(|(_, e)| e.p);
                    prop_assert_eq!(state.ready_priority(&k), ready);
                    let dirty = ready.is_some()
                        || model.processing.iter().any(|(x, d)| *x == k && d.is_some());
                    prop_assert_eq!(state.is_dirty(&k), dirty);
                }
            }
            Ok(())
        }

        fn config() -> Config {
            Config {
                cases: 2_000,
                rng_seed: RngSeed::Fixed(0x5eed_0a9e),
                failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
                    "proptest-regressions/priority_state.txt",
                ))),
                ..Config::default()
            }
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn matches_the_model_without_aging(ops in prop::collection::vec(op(), 0..60)) {
                run(None, &ops)?;
            }

            #[test]
            fn matches_the_model_with_aging(ops in prop::collection::vec(op(), 0..60)) {
                // Interval 30: an `Advance` of up to 190 is several priorities of age.
                run(Some(30), &ops)?;
            }
        }
    }
}
