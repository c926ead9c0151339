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

use std::fmt;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::compare::MinOrder;

mod entries;
mod iter;
mod sift;

pub use iter::{Drain, Iter};

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

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::hash::{BuildHasher, Hash};

    use super::*;
    use crate::compare::Compare;

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
