//! The hash index of the queued keys: lookups by key, appends to the FIFO, and the rebuild
//! that drops stale entries (invariant 4 of the parent module).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use super::WorkState;

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
