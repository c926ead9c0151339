//! The transitions: add, pop and done, each returning what it did.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use super::WorkState;
use crate::{AddOutcome, DoneOutcome, PopOutcome};

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

    /// [`add`](WorkState::add) by reference: the key is cloned only if it is queued (or handed
    /// back refused). Adding a key that is already queued, or already marked to run again,
    /// clones nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctrlq_queue_core::{AddOutcome, WorkState};
    ///
    /// let key: Arc<str> = Arc::from("ns/a");
    /// let mut state = WorkState::new();
    /// assert_eq!(state.add_ref(&key), AddOutcome::Queued);
    /// assert_eq!(state.add_ref(&key), AddOutcome::Coalesced);
    /// assert_eq!(Arc::strong_count(&key), 2, "one clone, in the queue");
    /// ```
    #[inline]
    pub fn add_ref(&mut self, key: &K) -> AddOutcome<K> {
        if self.shut_down {
            return AddOutcome::ShutDown(key.clone());
        }
        let hash = self.hasher.hash_one(key);
        if let Some(outcome) = self.add_present(hash, key) {
            return outcome;
        }
        self.push_back(hash, key.clone());
        AddOutcome::Queued
    }

    /// The outcome of adding a key that is queued or processing; `None` if it is neither.
    #[inline(always)]
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
