//! A 4-ary heap addressable by key.
//!
//! # Layout
//!
//! Entries live inline in the heap array, so comparisons never chase a pointer. Each entry has
//! a stable id: `slots` finds the id by the key's hash, and `positions[id]` is the entry's place
//! in the heap. A sift moves entries and rewrites their `positions` cells (a plain store); the
//! hash index changes only when a key comes or goes. An index holding positions directly would
//! be re-probed at every level of a sift, which would dominate a pop on a large heap.
//!
//! # Invariants
//!
//! 1. `slots` holds exactly the ids of the entries; for every entry `e` at `pos`,
//!    `positions[e.id] == pos`; the ids not in use are exactly those in `free`.
//! 2. `entries` is a 4-ary heap under `cmp`: no entry compares `Less` than its parent.
//!
//! Invariant 1 holds whatever the comparison returns: a comparison that is not a strict weak
//! order can only produce a wrong pop order, never a lost or duplicated entry.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::compare::{Compare, MinOrder};

/// Children per node. Four halves the levels of a binary heap, so a pop moves half as many
/// entries and updates half as many index slots, for one or two more comparisons per level
/// (the four children share one or two cache lines).
const ARITY: usize = 4;

/// The deepest path a sift can walk: `ARITY^MAX_DEPTH` exceeds any possible length.
const MAX_DEPTH: usize = (usize::BITS / ARITY.ilog2()) as usize;

/// A 4-ary heap addressable by key, ordered by a caller-supplied comparison.
///
/// Each key is present at most once. The comparison `C` decides the order: `compare(a, b) ==
/// Less` means `a` pops before `b`. The default, [`MinOrder`], pops the smallest value first
/// (`Ord`); any `Fn(&V, &V) -> Ordering` works too.
///
/// | operation | cost |
/// |---|---|
/// | [`add`], [`add_if_absent`], [`update`], [`delete`], [`pop`] | O(log n) |
/// | [`get`], [`contains_key`], [`peek`], [`len`] | O(1) |
/// | [`retain`] | O(n) |
///
/// Every entry knows its slot through a hash table that stores positions, not keys, so the key
/// is stored once and delete or update never scans.
///
/// # Ties
///
/// Among values that compare `Equal`, the pop order is deterministic (the same operations in the
/// same order give the same result) but it is not insertion order. For first-in-first-out among
/// equals, put a sequence number in the value and compare on it last:
///
/// ```
/// use ctrlq_queue_core::KeyedHeap;
///
/// // (priority, sequence): higher priority first, then the earlier sequence number.
/// let mut heap = KeyedHeap::new(|a: &(u8, u64), b: &(u8, u64)| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
/// let mut seq = 0;
/// for (key, priority) in [("a", 1), ("b", 5), ("c", 1), ("d", 5)] {
///     heap.add(key, (priority, seq));
///     seq += 1;
/// }
/// let order: Vec<_> = std::iter::from_fn(|| heap.pop().map(|(k, _)| k)).collect();
/// assert_eq!(order, ["b", "d", "a", "c"]);
/// ```
///
/// # Ordering requirement
///
/// The comparison must be a strict weak order and must not change while a value is in the heap
/// (change values only through [`update`], which re-orders). If it is not, pops may come out of
/// order, but the heap never loses, duplicates or misplaces an entry and never panics.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::KeyedHeap;
///
/// let mut heap = KeyedHeap::default(); // smallest value first
/// heap.add("pod-a", 30);
/// heap.add("pod-b", 10);
/// heap.add("pod-c", 20);
/// heap.add("pod-a", 5); // replace: re-ordered in place
/// assert_eq!(heap.get("pod-c"), Some(&20));
/// assert_eq!(heap.delete("pod-c"), Some(("pod-c", 20)));
/// assert_eq!(heap.pop(), Some(("pod-a", 5)));
/// assert_eq!(heap.pop(), Some(("pod-b", 10)));
/// assert!(heap.is_empty());
/// ```
///
/// [`add`]: KeyedHeap::add
/// [`add_if_absent`]: KeyedHeap::add_if_absent
/// [`update`]: KeyedHeap::update
/// [`delete`]: KeyedHeap::delete
/// [`pop`]: KeyedHeap::pop
/// [`get`]: KeyedHeap::get
/// [`contains_key`]: KeyedHeap::contains_key
/// [`peek`]: KeyedHeap::peek
/// [`len`]: KeyedHeap::len
/// [`retain`]: KeyedHeap::retain
#[derive(Clone)]
pub struct KeyedHeap<K, V, C = MinOrder> {
    /// The entries in heap order.
    entries: Vec<Entry<K, V>>,
    /// The id of every entry, found by the key's hash.
    slots: HashTable<usize>,
    /// The position in `entries` of each id.
    positions: Vec<usize>,
    /// Ids free for reuse.
    free: Vec<usize>,
    hasher: DefaultHashBuilder,
    cmp: C,
}

#[derive(Clone)]
struct Entry<K, V> {
    hash: u64,
    id: usize,
    key: K,
    value: V,
}

// ===== impl KeyedHeap =====

impl<K, V, C> KeyedHeap<K, V, C> {
    /// Creates an empty heap ordered by `cmp`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::KeyedHeap;
    ///
    /// // Largest first.
    /// let mut heap = KeyedHeap::new(|a: &u32, b: &u32| b.cmp(a));
    /// heap.add("x", 1);
    /// heap.add("y", 2);
    /// assert_eq!(heap.pop(), Some(("y", 2)));
    /// ```
    pub fn new(cmp: C) -> Self {
        Self::with_capacity(cmp, 0)
    }

    /// Creates an empty heap ordered by `cmp`, with room for `capacity` entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{KeyedHeap, MinOrder};
    ///
    /// let heap: KeyedHeap<String, u64> = KeyedHeap::with_capacity(MinOrder, 1024);
    /// assert!(heap.is_empty());
    /// ```
    pub fn with_capacity(cmp: C, capacity: usize) -> Self {
        KeyedHeap {
            entries: Vec::with_capacity(capacity),
            slots: HashTable::with_capacity(capacity),
            positions: Vec::with_capacity(capacity),
            free: Vec::new(),
            hasher: DefaultHashBuilder::default(),
            cmp,
        }
    }

    /// The number of entries.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add(1, "one");
    /// assert_eq!(heap.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the heap has no entries.
    ///
    /// # Examples
    ///
    /// ```
    /// let heap: ctrlq_queue_core::KeyedHeap<u8, u8> = ctrlq_queue_core::KeyedHeap::default();
    /// assert!(heap.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry that [`pop`](KeyedHeap::pop) would return, without removing it.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("b", 2);
    /// heap.add("a", 1);
    /// assert_eq!(heap.peek(), Some((&"a", &1)));
    /// assert_eq!(heap.len(), 2);
    /// ```
    pub fn peek(&self) -> Option<(&K, &V)> {
        self.entries.first().map(|e| (&e.key, &e.value))
    }

    /// Removes every entry.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.clear();
    /// assert!(heap.is_empty());
    /// ```
    pub fn clear(&mut self) {
        self.slots.clear();
        self.positions.clear();
        self.free.clear();
        self.entries.clear();
    }

    /// Makes room for at least `additional` more entries, so a large batch of adds does not
    /// re-hash the index as it grows.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.reserve(1000);
    /// heap.add("b", 2);
    /// assert_eq!(heap.pop(), Some(("a", 1)));
    /// ```
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
        let (entries, positions) = (&self.entries, &self.positions);
        self.slots
            .reserve(additional, |&id| entries[at(positions, id)].hash);
    }

    /// The comparison the heap is ordered by.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_core::{Compare, KeyedHeap, MinOrder};
    ///
    /// let heap: KeyedHeap<&str, u8> = KeyedHeap::new(MinOrder);
    /// assert!(heap.comparator().compare(&1, &2).is_lt());
    /// ```
    pub fn comparator(&self) -> &C {
        &self.cmp
    }
}

/// The position of `id`.
fn at(positions: &[usize], id: usize) -> usize {
    positions[id]
}

/// An empty min-heap ([`MinOrder`]). For another default-constructible comparison, use
/// `KeyedHeap::new(C::default())`.
impl<K, V> Default for KeyedHeap<K, V, MinOrder> {
    fn default() -> Self {
        Self::new(MinOrder)
    }
}

impl<K: fmt::Debug, V: fmt::Debug, C> fmt::Debug for KeyedHeap<K, V, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for Entry<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Entry")
            .field(&self.key)
            .field(&self.value)
            .finish()
    }
}

// ===== the operations by key =====
//
// Adding, finding, changing and removing entries by key. They keep the index (invariant 1 of
// the module docs) and leave the heap order to the sifts below.

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

// ===== the sifts =====
//
// Restoring the heap order (invariant 2 of the module docs) after an entry was added,
// changed or moved: sifts up and down, which rewrite the `positions` of the entries they move.

impl<K, V, C> KeyedHeap<K, V, C>
where
    K: Hash + Eq,
    C: Compare<V>,
{
    /// Records that the entry now at `pos` sits there.
    pub(super) fn place(&mut self, pos: usize) {
        self.positions[self.entries[pos].id] = pos;
    }

    /// Moves the entry at `pos` up or down until the heap order holds again.
    pub(super) fn restore(&mut self, pos: usize) {
        if !self.sift_up(pos) {
            self.sift_down(pos);
        }
    }

    /// Moves the entry at `pos` towards the root while it pops before its parent. Returns whether
    /// it moved.
    pub(super) fn sift_up(&mut self, start: usize) -> bool {
        let mut pos = start;
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if self.order(start, parent) != Ordering::Less {
                break;
            }
            pos = parent;
        }
        if pos == start {
            return false;
        }
        self.move_chain(start, pos);
        true
    }

    /// Moves the entry at `pos` towards the leaves while a child pops before it.
    ///
    /// The target is found first and the entries are moved after, so a comparison that panics
    /// (the debug check of the ordering) leaves the index intact.
    pub(super) fn sift_down(&mut self, start: usize) {
        // Bottom-up ("Floyd"): walk the path of first-popping children to a leaf, then climb
        // back to the deepest path entry that pops before the moving one. A moved-down entry
        // (usually the former last) belongs near the leaves, so this skips comparing it at
        // every level.
        let mut path = [0usize; MAX_DEPTH];
        let mut depth = 0;
        let mut node = start;
        loop {
            let first = ARITY * node + 1;
            let end = (first + ARITY).min(self.entries.len());
            let Some(children) = self.entries.get(first..end).filter(|c| !c.is_empty()) else {
                break;
            };
            let mut best = 0;
            for (i, child) in children.iter().enumerate().skip(1) {
                if self.less(child, &children[best]) {
                    best = i;
                }
            }
            node = first + best;
            path[depth] = node;
            depth += 1;
        }
        while depth > 0 && self.order(path[depth - 1], start) != Ordering::Less {
            depth -= 1;
        }
        if depth == 0 {
            return;
        }
        let mut pos = start;
        for &child in &path[..depth] {
            self.entries.swap(pos, child);
            self.place(pos);
            pos = child;
        }
        self.place(pos);
    }

    /// Moves the entry at `start` up to `end` (an ancestor), shifting the path down one level.
    fn move_chain(&mut self, start: usize, end: usize) {
        let mut pos = start;
        while pos != end {
            let parent = (pos - 1) / ARITY;
            self.entries.swap(pos, parent);
            self.place(pos);
            pos = parent;
        }
        self.place(pos);
    }

    pub(super) fn order(&self, a: usize, b: usize) -> Ordering {
        self.compare(&self.entries[a], &self.entries[b])
    }

    fn less(&self, a: &Entry<K, V>, b: &Entry<K, V>) -> bool {
        self.compare(a, b) == Ordering::Less
    }

    fn compare(&self, a: &Entry<K, V>, b: &Entry<K, V>) -> Ordering {
        let (va, vb) = (&a.value, &b.value);
        let ord = self.cmp.compare(va, vb);
        debug_assert!(
            ord == self.cmp.compare(vb, va).reverse(),
            "the comparison is not antisymmetric: a strict weak order is required"
        );
        ord
    }
}

// ===== iteration =====
//
// Over the entries, borrowed or drained.

/// An iterator over the entries of a [`KeyedHeap`], in heap (unspecified) order.
///
/// Returned by [`KeyedHeap::iter`].
#[derive(Debug)]
pub struct Iter<'a, K, V> {
    inner: std::slice::Iter<'a, Entry<K, V>>,
}

/// A draining iterator over the entries of a [`KeyedHeap`], in unspecified order.
///
/// Returned by [`KeyedHeap::drain`]. The heap is empty afterwards, even if the iterator is
/// dropped before the end.
#[derive(Debug)]
pub struct Drain<'a, K, V> {
    inner: std::vec::Drain<'a, Entry<K, V>>,
}

impl<K, V, C> KeyedHeap<K, V, C> {
    /// Iterates over every entry, in heap (unspecified) order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.add("b", 2);
    /// let mut keys: Vec<_> = heap.iter().map(|(k, _)| *k).collect();
    /// keys.sort();
    /// assert_eq!(keys, ["a", "b"]);
    /// ```
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter {
            inner: self.entries.iter(),
        }
    }

    /// Removes every entry, yielding them in unspecified order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.add("b", 2);
    /// assert_eq!(heap.drain().count(), 2);
    /// assert!(heap.is_empty());
    /// ```
    pub fn drain(&mut self) -> Drain<'_, K, V> {
        self.slots.clear();
        self.positions.clear();
        self.free.clear();
        Drain {
            inner: self.entries.drain(..),
        }
    }
}

impl<'a, K, V, C> IntoIterator for &'a KeyedHeap<K, V, C> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (&e.key, &e.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<K, V> Iterator for Drain<'_, K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (e.key, e.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Drain<'_, K, V> {}

#[cfg(test)]
mod tests {
    use super::*;

    impl<K: Hash + Eq, V, C: Compare<V>> KeyedHeap<K, V, C> {
        /// Checks invariant 1 of the module doc: the index.
        pub(crate) fn check_index(&self) {
            assert_eq!(self.slots.len(), self.entries.len(), "one slot per entry");
            assert_eq!(
                self.positions.len(),
                self.entries.len() + self.free.len(),
                "every id is either used or free"
            );
            for (pos, e) in self.entries.iter().enumerate() {
                assert_eq!(
                    at(&self.positions, e.id),
                    pos,
                    "positions[id] is the entry's"
                );
                assert!(!self.free.contains(&e.id), "a used id is not free");
            }
            for (pos, e) in self.entries.iter().enumerate() {
                assert_eq!(
                    e.hash,
                    self.hasher.hash_one(&e.key),
                    "stored hash is the key's"
                );
                assert_eq!(
                    self.position(e.hash, &e.key),
                    Some(pos),
                    "slot points at the entry"
                );
            }
        }

        /// Checks both invariants of the module doc.
        pub(crate) fn check_invariants(&self) {
            self.check_index();
            for pos in 1..self.entries.len() {
                assert_ne!(
                    self.order(pos, (pos - 1) / ARITY),
                    Ordering::Less,
                    "heap order"
                );
            }
        }
    }

    #[test]
    fn invariants_hold_through_mixed_operations() {
        let mut heap = KeyedHeap::default();
        for i in 0..200u32 {
            heap.add(i, (i * 7919) % 101);
            heap.check_invariants();
        }
        for i in (0..200u32).step_by(3) {
            heap.delete(&i);
            heap.check_invariants();
        }
        for i in (1..200u32).step_by(5) {
            heap.update(&i, |v| *v = 200 - *v);
            heap.check_invariants();
        }
        heap.retain(|k, _| k % 2 == 0);
        heap.check_invariants();
        let mut last = 0;
        while let Some((_, v)) = heap.pop() {
            assert!(v >= last);
            last = v;
            heap.check_invariants();
        }
    }

    #[test]
    fn a_comparison_that_lies_never_corrupts_the_index() {
        // Not a strict weak order: the result depends on a counter, not on the values.
        let flip = std::cell::Cell::new(0u32);
        let cmp = |_: &u32, _: &u32| {
            flip.set(flip.get().wrapping_add(1));
            if flip.get().is_multiple_of(3) {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        };
        let mut heap = KeyedHeap::new(cmp);
        let (mut added, mut flagged) = (0, 0);
        for i in 0..50u32 {
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| heap.add(i, i)));
            // Debug builds flag the comparison; release builds just order wrongly. Either way
            // the entry is in and the index is intact.
            flagged += usize::from(step.is_err());
            added += 1;
            heap.check_index();
            assert_eq!(heap.len(), added);
            assert!(heap.contains_key(&i));
        }
        for i in (0..50u32).step_by(2) {
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| heap.delete(&i)));
            heap.check_index();
            assert!(!heap.contains_key(&i), "{step:?}");
        }
        assert_eq!(heap.len(), 25);
        if cfg!(debug_assertions) {
            assert!(
                flagged > 0,
                "debug builds check that the comparison is antisymmetric"
            );
        } else {
            assert_eq!(flagged, 0);
        }
    }
}
