//! The state machine of a de-duplicating work queue, without locks, wake-ups or time.
//!
//! # Invariants
//!
//! 1. The FIFO holds only dirty keys: a queued key is dirty by definition.
//! 2. No key is both queued and processing.
//! 3. A key is queued at most once.
//! 4. `queued` holds the sequence number of every queued key (`head .. head + queue.len()`),
//!    one per key, so a key lives once in memory while it waits (in the FIFO, not in the
//!    index). It may also hold stale numbers of keys popped since it was last rebuilt (see
//!    below); a lookup matches an entry only if its position is inside the FIFO and holds the
//!    key looked for, so a stale entry never matches a key it does not point at.
//!
//! A pop leaves its key's index entry behind instead of removing it: in a large queue the
//! removal would cost two cache misses (the index's control bytes and its slot) per pop. The
//! index is rebuilt from the FIFO when it fills, which drops every stale entry, at twice the
//! queued keys; stale entries therefore never outnumber the capacity a growing queue would
//! have reserved anyway, and the rebuild's cost is paid once per that many adds.
//!
//! The dirty set of the Go original is the union of the queued keys and the processing keys
//! whose flag says "added again while processing"; nothing stores it twice.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::{AddOutcome, DoneOutcome, PopOutcome};

/// The de-duplicating work-queue state machine that an async queue wraps with a lock and
/// wake-ups.
///
/// Keys are handed out in the order they were first added (FIFO). A key is queued at most once
/// ([`AddOutcome::Coalesced`]), is never handed out while it is being processed, and a key added
/// while it is processed is queued again when [`done`](WorkState::done) is called
/// ([`AddOutcome::Deferred`], then [`DoneOutcome::Requeued`]). Every transition returns what
/// happened, so the caller knows whom to wake.
///
/// A queued key is stored once: the FIFO holds the key and a hash index holds its 4-byte
/// sequence number. A key being processed is stored in the processing set, and
/// [`pop`](WorkState::pop) hands the caller a clone.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, WorkState};
///
/// let mut state = WorkState::new();
/// assert_eq!(state.add("a"), AddOutcome::Queued);
/// assert_eq!(state.add("a"), AddOutcome::Coalesced);
/// assert_eq!(state.pop(), PopOutcome::Item("a"));
///
/// // Added again while processing: deferred until done.
/// assert_eq!(state.add("a"), AddOutcome::Deferred { newly_dirty: true });
/// assert_eq!(state.pop(), PopOutcome::Empty);
/// assert_eq!(state.done("a"), DoneOutcome::Requeued(()));
/// assert_eq!(state.pop(), PopOutcome::Item("a"));
/// assert_eq!(state.done("a"), DoneOutcome::Finished);
///
/// state.shut_down();
/// assert_eq!(state.add("b"), AddOutcome::ShutDown("b"));
/// assert_eq!(state.pop(), PopOutcome::ShutDown);
/// ```
///
/// [`AddOutcome::Coalesced`]: crate::AddOutcome::Coalesced
/// [`AddOutcome::Deferred`]: crate::AddOutcome::Deferred
/// [`DoneOutcome::Requeued`]: crate::DoneOutcome::Requeued
pub struct WorkState<K> {
    /// Queued keys in FIFO order; `queue[i]` has sequence number `head + i`.
    queue: VecDeque<K>,
    /// Sequence number of `queue[0]` (wrapping).
    head: usize,
    /// Sequence numbers of the queued keys, found by the key's hash.
    queued: HashTable<usize>,
    /// Keys being processed, with `true` when added again while processing (dirty).
    processing: HashTable<(K, bool)>,
    hasher: DefaultHashBuilder,
    shut_down: bool,
}

// ===== construction and reads =====

impl<K> WorkState<K> {
    /// Creates an empty, open state.
    ///
    /// # Examples
    ///
    /// ```
    /// let state: ctrlq_queue_core::WorkState<String> = ctrlq_queue_core::WorkState::new();
    /// assert!(state.is_idle());
    /// ```
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Creates an empty, open state with room for `capacity` queued keys.
    ///
    /// # Examples
    ///
    /// ```
    /// let state: ctrlq_queue_core::WorkState<u64> = ctrlq_queue_core::WorkState::with_capacity(1024);
    /// assert_eq!(state.len(), 0);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        WorkState {
            queue: VecDeque::with_capacity(capacity),
            head: 0,
            queued: HashTable::with_capacity(capacity),
            processing: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            shut_down: false,
        }
    }

    /// The number of queued keys (not counting keys being processed).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add(1);
    /// state.add(2);
    /// state.pop();
    /// assert_eq!(state.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no key is queued.
    ///
    /// # Examples
    ///
    /// ```
    /// let state: ctrlq_queue_core::WorkState<u8> = ctrlq_queue_core::WorkState::new();
    /// assert!(state.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The number of keys being processed.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add(1);
    /// state.pop();
    /// assert_eq!(state.processing_len(), 1);
    /// ```
    pub fn processing_len(&self) -> usize {
        self.processing.len()
    }

    /// Whether nothing is queued and nothing is being processed: a drain is complete.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add(1);
    /// state.pop();
    /// assert!(!state.is_idle());
    /// state.done(&1);
    /// assert!(state.is_idle());
    /// ```
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.processing.is_empty()
    }

    /// Shuts the state down: later adds are refused, and [`pop`](WorkState::pop) reports
    /// [`PopOutcome::ShutDown`] once the queue is empty. Returns `true` if this call shut it down.
    ///
    /// Queued keys stay queued and keys being processed may still be re-queued by `done`: they
    /// were accepted before the shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add("a");
    /// assert!(state.shut_down());
    /// assert!(!state.shut_down());
    /// assert_eq!(state.pop(), ctrlq_queue_core::PopOutcome::Item("a"));
    /// ```
    ///
    /// [`PopOutcome::ShutDown`]: crate::PopOutcome::ShutDown
    pub fn shut_down(&mut self) -> bool {
        !std::mem::replace(&mut self.shut_down, true)
    }

    /// Whether [`shut_down`](WorkState::shut_down) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state: ctrlq_queue_core::WorkState<u8> = ctrlq_queue_core::WorkState::new();
    /// state.shut_down();
    /// assert!(state.is_shut_down());
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }
}

// ===== the transitions (add, pop, done), each returning what it did =====

impl<K: Hash + Eq + Clone> WorkState<K> {
    /// Adds `key`: queues it, coalesces it with the queued copy, or marks it to run again after
    /// the current processing.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{AddOutcome, WorkState};
    ///
    /// let mut state = WorkState::new();
    /// assert_eq!(state.add("a"), AddOutcome::Queued);
    /// assert_eq!(state.add("a"), AddOutcome::Coalesced);
    /// assert_eq!(state.len(), 1);
    /// ```
    #[inline]
    pub fn add(&mut self, key: K) -> AddOutcome<K> {
        if self.shut_down {
            return AddOutcome::ShutDown(key);
        }
        let hash = self.hasher.hash_one(&key);
        if let Some(outcome) = self.add_present(hash, &key) {
            return outcome;
        }
        self.push_back(hash, key);
        AddOutcome::Queued
    }

    /// The outcome of adding a key that is queued or processing; `None` if it is neither.
    #[inline]
    fn add_present(&mut self, hash: u64, key: &K) -> Option<AddOutcome<K>> {
        if self.queued_index(hash, key).is_some() {
            return Some(AddOutcome::Coalesced);
        }
        let (_, dirty) = self.processing.find_mut(hash, |(k, _)| k == key)?;
        Some(if std::mem::replace(dirty, true) {
            AddOutcome::Coalesced
        } else {
            AddOutcome::Deferred { newly_dirty: true }
        })
    }

    /// Takes the first queued key and marks it as being processed.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{PopOutcome, WorkState};
    ///
    /// let mut state = WorkState::new();
    /// assert_eq!(state.pop(), PopOutcome::<&str>::Empty);
    /// state.add("a");
    /// assert_eq!(state.pop(), PopOutcome::Item("a"));
    /// assert!(state.is_processing("a"));
    /// ```
    pub fn pop(&mut self) -> PopOutcome<K> {
        let Some(key) = self.queue.pop_front() else {
            return if self.shut_down {
                PopOutcome::ShutDown
            } else {
                PopOutcome::Empty
            };
        };
        // The key's index entry stays behind, stale (invariant 4).
        let hash = self.hasher.hash_one(&key);
        self.head = self.head.wrapping_add(1);
        let hasher = &self.hasher;
        self.processing
            .insert_unique(hash, (key.clone(), false), |(k, _)| hasher.hash_one(k));
        PopOutcome::Item(key)
    }

    /// Marks `key` as no longer being processed, and queues it again if it was added meanwhile.
    ///
    /// A key that is not being processed is ignored ([`DoneOutcome::NotProcessing`]): unlike the
    /// Go original, a stray `done` never creates a second queue entry.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{DoneOutcome, WorkState};
    ///
    /// let mut state = WorkState::new();
    /// state.add("a");
    /// state.pop();
    /// assert_eq!(state.done("a"), DoneOutcome::Finished);
    /// assert_eq!(state.done("a"), DoneOutcome::NotProcessing);
    /// ```
    pub fn done<Q>(&mut self, key: &Q) -> DoneOutcome
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let Ok(entry) = self.processing.find_entry(hash, |(k, _)| k.borrow() == key) else {
            return DoneOutcome::NotProcessing;
        };
        let ((key, dirty), _) = entry.remove();
        if !dirty {
            return DoneOutcome::Finished;
        }
        self.push_back(hash, key);
        DoneOutcome::Requeued(())
    }
}

// ===== the index of the queued keys (invariant 4) =====

impl<K: Hash + Eq + Clone> WorkState<K> {
    /// The index in `queue` of a queued `key`.
    #[inline]
    pub(super) fn queued_index<Q>(&self, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (queue, head) = (&self.queue, self.head);
        self.queued
            .find(hash, |&seq| {
                queue
                    .get(seq.wrapping_sub(head))
                    .is_some_and(|k| k.borrow() == key)
            })
            .map(|&seq| seq.wrapping_sub(head))
    }

    #[inline]
    pub(super) fn push_back(&mut self, hash: u64, key: K) {
        if self.queued.len() == self.queued.capacity() {
            self.rebuild_index();
        }
        let seq = self.head.wrapping_add(self.queue.len());
        self.queue.push_back(key);
        // Room was made above, so the re-hash closure is never called.
        let (queue, head, hasher) = (&self.queue, self.head, &self.hasher);
        self.queued.insert_unique(hash, seq, |&s| {
            queue
                .get(s.wrapping_sub(head))
                .map_or(0, |k| hasher.hash_one(k))
        });
    }
}

impl<K: Hash> WorkState<K> {
    /// Rebuilds the index from the FIFO, with room for twice the queued keys: stale entries are
    /// dropped, and a growing queue doubles its index. Keys are re-inserted in FIFO order.
    fn rebuild_index(&mut self) {
        let capacity = (2 * (self.queue.len() + 1)).max(16);
        let mut index = HashTable::with_capacity(capacity);
        let (head, hasher) = (self.head, &self.hasher);
        for (i, key) in self.queue.iter().enumerate() {
            let seq = head.wrapping_add(i);
            let queue = &self.queue;
            // Room was reserved above, so the re-hash closure is never called.
            index.insert_unique(hasher.hash_one(key), seq, |&s| {
                queue
                    .get(s.wrapping_sub(head))
                    .map_or(0, |k| hasher.hash_one(k))
            });
        }
        self.queued = index;
    }
}

impl<K: Hash + Eq + Clone> WorkState<K> {
    /// Whether `key` is queued (waiting to be handed out).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add(String::from("a"));
    /// assert!(state.is_queued("a"));
    /// ```
    pub fn is_queued<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.queued_index(self.hasher.hash_one(key), key).is_some()
    }

    /// Whether `key` is being processed (handed out and not yet done).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut state = ctrlq_queue_core::WorkState::new();
    /// state.add("a");
    /// assert!(!state.is_processing("a"));
    /// state.pop();
    /// assert!(state.is_processing("a"));
    /// ```
    pub fn is_processing<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.processing
            .find(self.hasher.hash_one(key), |(k, _)| k.borrow() == key)
            .is_some()
    }
}

impl<K> Default for WorkState<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for WorkState<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkState")
            .field("queued", &self.queue.len())
            .field("processing", &self.processing.len())
            .field("shut_down", &self.shut_down)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<K: Hash + Eq + Clone> WorkState<K> {
        /// Checks the invariants of the module doc.
        pub(crate) fn check_invariants(&self) {
            assert!(
                self.queued.len() >= self.queue.len(),
                "invariant 4: an index per queued key, and perhaps stale ones"
            );
            for (i, key) in self.queue.iter().enumerate() {
                assert_eq!(
                    self.queued_index(self.hasher.hash_one(key), key),
                    Some(i),
                    "invariants 3 and 4: the index finds the one queued copy"
                );
                assert!(
                    !self.is_processing(key),
                    "invariant 2: not queued and processing"
                );
            }
        }
    }

    #[test]
    fn stale_index_entries_never_match_and_are_dropped_by_rebuilds() {
        let mut state = WorkState::new();
        for i in 0..10_000u32 {
            // A small live set churning through the queue; key `i % 7` comes back often.
            assert_eq!(state.add(i % 7), AddOutcome::Queued);
            assert_eq!(state.add(i % 7), AddOutcome::Coalesced);
            if i % 3 == 0 {
                assert_eq!(state.pop(), PopOutcome::Item(i % 7));
                assert_eq!(
                    state.add(i % 7),
                    AddOutcome::Deferred { newly_dirty: true },
                    "processing, not queued"
                );
                assert_eq!(state.done(&(i % 7)), DoneOutcome::Requeued(()));
            }
            let PopOutcome::Item(k) = state.pop() else {
                panic!("a key is queued")
            };
            assert_eq!(state.done(&k), DoneOutcome::Finished);
            state.check_invariants();
            assert!(
                state.queued.capacity() <= 32,
                "stale entries are dropped, not kept"
            );
        }
    }

    #[test]
    fn a_pop_leaves_its_index_entry_until_the_index_fills() {
        let mut state = WorkState::new();
        state.add(1u32);
        state.add(2);
        assert_eq!(state.pop(), PopOutcome::Item(1));
        state.add(3);
        assert_eq!(
            state.queued.len(),
            3,
            "1's entry stays, stale, beside 2's and 3's"
        );
        state.check_invariants();
        // Filling the index rebuilds it from the queue: the stale entry goes.
        let mut key = 10;
        while state.queued.len() < state.queued.capacity() {
            state.add(key);
            key += 1;
        }
        state.add(key);
        assert_eq!(state.queued.len(), state.len(), "no stale entry left");
        state.check_invariants();
    }

    #[test]
    fn a_rebuild_leaves_room_for_twice_the_queued_keys() {
        let mut state = WorkState::new();
        for i in 0..100u32 {
            state.add(i);
        }
        state.rebuild_index();
        assert_eq!(state.queued.len(), 100);
        assert!(
            state.queued.capacity() >= 2 * 100,
            "{}",
            state.queued.capacity()
        );
        state.check_invariants();
    }

    #[test]
    fn sequence_numbers_wrap_around() {
        let mut state = WorkState::new();
        state.head = usize::MAX - 2;
        for round in 0..3u32 {
            for k in 0..5u32 {
                assert_eq!(state.add(k + 10 * round), AddOutcome::Queued);
                assert_eq!(state.add(k + 10 * round), AddOutcome::Coalesced);
                state.check_invariants();
            }
            for k in 0..5u32 {
                assert_eq!(state.pop(), PopOutcome::Item(k + 10 * round));
                assert_eq!(state.done(&(k + 10 * round)), DoneOutcome::Finished);
                state.check_invariants();
            }
        }
        assert!(state.head < 100, "the head wrapped past usize::MAX");
    }
}
