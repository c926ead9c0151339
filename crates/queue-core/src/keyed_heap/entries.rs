//! The operations by key: adding, finding, changing and removing entries. They keep the
//! index (invariant 1 of the parent module) and leave the heap order to [`sift`](super::sift).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use super::{ARITY, Entry, KeyedHeap, at};
use crate::compare::Compare;

impl<K, V, C> KeyedHeap<K, V, C>
where
    K: Hash + Eq,
    C: Compare<V>,
{
    /// Inserts `key` with `value`, or replaces the value of a present key and re-orders it in
    /// place. Returns the replaced value.
    ///
    /// The key already stored is kept when the value is replaced.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// assert_eq!(heap.add("a", 10), None);
    /// heap.add("b", 5);
    /// assert_eq!(heap.add("a", 1), Some(10));
    /// assert_eq!(heap.pop(), Some(("a", 1)));
    /// ```
    pub fn add(&mut self, key: K, value: V) -> Option<V> {
        let hash = self.hasher.hash_one(&key);
        match self.position(hash, &key) {
            Some(pos) => {
                let old = std::mem::replace(&mut self.entries[pos].value, value);
                self.restore(pos);
                Some(old)
            }
            None => {
                self.insert_new(hash, key, value);
                None
            }
        }
    }

    /// Inserts `key` with `value` unless the key is present; then both are handed back and the
    /// heap is unchanged.
    ///
    /// # Errors
    ///
    /// `Err((key, value))` when `key` is already present.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// assert_eq!(heap.add_if_absent("a", 1), Ok(()));
    /// assert_eq!(heap.add_if_absent("a", 2), Err(("a", 2)));
    /// assert_eq!(heap.get("a"), Some(&1));
    /// ```
    pub fn add_if_absent(&mut self, key: K, value: V) -> Result<(), (K, V)> {
        let hash = self.hasher.hash_one(&key);
        if self.position(hash, &key).is_some() {
            return Err((key, value));
        }
        self.insert_new(hash, key, value);
        Ok(())
    }

    /// Changes the value of `key` in place with `f`, then re-orders it. Returns `false`, without
    /// calling `f`, when the key is absent.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 10);
    /// heap.add("b", 20);
    /// assert!(heap.update("b", |v| *v = 1));
    /// assert!(!heap.update("zzz", |v| *v = 1));
    /// assert_eq!(heap.peek(), Some((&"b", &1)));
    /// ```
    pub fn update<Q>(&mut self, key: &Q, f: impl FnOnce(&mut V)) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let Some(pos) = self.position(hash, key) else {
            return false;
        };
        f(&mut self.entries[pos].value);
        self.restore(pos);
        true
    }

    /// Removes `key` and returns its entry.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// assert_eq!(heap.delete("a"), Some(("a", 1)));
    /// assert_eq!(heap.delete("a"), None);
    /// ```
    pub fn delete<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let (entries, positions) = (&self.entries, &self.positions);
        let slot = self
            .slots
            .find_entry(hash, |&id| entries[at(positions, id)].key.borrow() == key)
            .ok()?;
        let (id, _) = slot.remove();
        Some(self.remove_at(at(&self.positions, id)))
    }

    /// Removes and returns the first entry in the heap's order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("late", 9);
    /// heap.add("early", 1);
    /// assert_eq!(heap.pop(), Some(("early", 1)));
    /// assert_eq!(heap.pop(), Some(("late", 9)));
    /// assert_eq!(heap.pop(), None);
    /// ```
    pub fn pop(&mut self) -> Option<(K, V)> {
        let head = self.entries.first()?;
        let (hash, head_id) = (head.hash, head.id);
        let slot = self
            .slots
            .find_entry(hash, |&id| id == head_id)
            .expect("invariant 1: the head entry has a slot");
        slot.remove();
        Some(self.remove_at(0))
    }

    /// The value of `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add(String::from("a"), 1);
    /// assert_eq!(heap.get("a"), Some(&1)); // look up by &str
    /// ```
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_key_value(key).map(|(_, v)| v)
    }

    /// The stored key and the value of `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// assert_eq!(heap.get_key_value("a"), Some((&"a", &1)));
    /// ```
    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let e = &self.entries[self.position(hash, key)?];
        Some((&e.key, &e.value))
    }

    /// Whether `key` is present.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// assert!(heap.contains_key("a"));
    /// assert!(!heap.contains_key("b"));
    /// ```
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.position(self.hasher.hash_one(key), key).is_some()
    }

    /// Keeps only the entries for which `f` returns `true`; `f` may change the values it keeps.
    /// O(n): the heap is rebuilt once.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
    ///     heap.add(k, v);
    /// }
    /// heap.retain(|_, v| {
    ///     *v *= 10;
    ///     *v != 20
    /// });
    /// assert_eq!(heap.pop(), Some(("a", 10)));
    /// assert_eq!(heap.pop(), Some(("c", 30)));
    /// assert_eq!(heap.pop(), None);
    /// ```
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|e| f(&e.key, &mut e.value));
        // Renumber: ids become positions, so nothing is free.
        self.slots.clear();
        self.free.clear();
        self.positions.clear();
        for (pos, e) in self.entries.iter_mut().enumerate() {
            e.id = pos;
            self.positions.push(e.id);
        }
        let entries = &self.entries;
        for e in entries {
            // Ids equal positions here.
            self.slots
                .insert_unique(e.hash, e.id, |&id| entries[id].hash);
        }
        for pos in (0..self.entries.len().div_ceil(ARITY)).rev() {
            self.sift_down(pos);
        }
    }

    /// The position of `key`, found through its precomputed `hash`.
    pub(super) fn position<Q>(&self, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (entries, positions) = (&self.entries, &self.positions);
        self.slots
            .find(hash, |&id| entries[at(positions, id)].key.borrow() == key)
            .map(|&id| at(positions, id))
    }

    fn insert_new(&mut self, hash: u64, key: K, value: V) {
        let pos = self.entries.len();
        let id = match self.free.pop() {
            Some(id) => {
                self.positions[id] = pos;
                id
            }
            None => {
                let id = self.positions.len();
                self.positions.push(pos);
                id
            }
        };
        self.entries.push(Entry {
            hash,
            id,
            key,
            value,
        });
        let (entries, positions) = (&self.entries, &self.positions);
        self.slots
            .insert_unique(hash, id, |&id| entries[at(positions, id)].hash);
        self.sift_up(pos);
    }

    /// Removes the entry at `pos`, whose slot the caller already removed.
    fn remove_at(&mut self, pos: usize) -> (K, V) {
        let last = self.entries.len() - 1;
        let removed = self.entries.swap_remove(pos);
        self.free.push(removed.id);
        if pos != last {
            // The former last entry now sits at `pos`.
            self.place(pos);
            self.restore(pos);
        }
        (removed.key, removed.value)
    }
}
