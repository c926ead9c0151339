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
                    .get(seq.wrapping_sub(head) as usize)
                    .is_some_and(|k| k.borrow() == key)
            })
            .map(|&seq| seq.wrapping_sub(head) as usize)
    }

    #[inline]
    pub(super) fn push_back(&mut self, hash: u64, key: K) {
        if self.queued.len() == self.queued.capacity() {
            self.rebuild_index();
        }
        let seq = self.head.wrapping_add(self.queue.len() as u32);
        self.queue.push_back(key);
        // Room was made above, so the re-hash closure is never called.
        let (queue, head, hasher) = (&self.queue, self.head, &self.hasher);
        self.queued.insert_unique(hash, seq, |&s| {
            queue
                .get(s.wrapping_sub(head) as usize)
                .map_or(0, |k| hasher.hash_one(k))
        });
    }
}

impl<K: Hash> WorkState<K> {
    /// Rebuilds the index from the FIFO, with room for twice the queued keys: stale entries are
    /// dropped, and a growing queue doubles its index. Keys are re-inserted in FIFO order.
    ///
    /// The table's own growth would rehash in bucket order, reading the keys (and, for keys
    /// that point to their bytes, those bytes) in random order: two cache misses per key at a
    /// million keys. The FIFO order reads them sequentially, which costs a fraction of that.
    fn rebuild_index(&mut self) {
        let capacity = (2 * (self.queue.len() + 1)).max(16);
        let mut index = HashTable::with_capacity(capacity);
        let (head, hasher) = (self.head, &self.hasher);
        for (i, key) in self.queue.iter().enumerate() {
            let seq = head.wrapping_add(i as u32);
            let queue = &self.queue;
            // Room was reserved above, so the re-hash closure is never called.
            index.insert_unique(hasher.hash_one(key), seq, |&s| {
                queue
                    .get(s.wrapping_sub(head) as usize)
                    .map_or(0, |k| hasher.hash_one(k))
            });
        }
        self.queued = index;
    }
}
