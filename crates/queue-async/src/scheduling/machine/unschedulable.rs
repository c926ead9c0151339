//! The unschedulable sub-queue: items waiting for an event (rejected or gated).
//!
//! # Layout
//!
//! The items live in a dense vector, in insertion order, each with its key's hash, and a hash
//! table finds an item's position by that hash.
//! A move scans the vector in order: items queued in the order of their timestamps reach the
//! backoff heap in that order, so each insertion stays at the bottom of the heap instead of
//! sifting up as it would in hash order. A taken item leaves a hole, closed when the scan ends
//! (see [`Extract`]).
//!
//! Before it decides about a batch of items, the scan reads, in one pass, the fields of each
//! item's bookkeeping box that a move reads, and its key, then decides about each item of the
//! batch. This keeps a move over many unschedulable items fast when they failed in an order
//! unrelated to where they sit in memory, as in a large cluster (`benches/RESULTS.md` has the
//! figures).
//!
//! # Invariants
//!
//! 1. `index` holds exactly one position per slot, found by the slot's hash, and
//!    `slots[p].hash` is the hash of `slots[p].item.key` under `hasher`.
//! 2. No two slots have equal keys.
//! 3. No slot is empty, except during an [`Extract`] (which closes the holes when dropped).

use std::hash::{BuildHasher, Hash};
use std::hint::black_box;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::item::QueuedItem;

/// How many items the scan reads ahead in one pass (their misses overlap; see the module docs).
const BATCH: usize = 16;

/// Items rejected or gated, by key.
#[derive(Debug)]
pub(crate) struct Unschedulable<K, T> {
    slots: Vec<Slot<K, T>>,
    index: HashTable<usize>,
    hasher: DefaultHashBuilder,
}

#[derive(Debug)]
struct Slot<K, T> {
    hash: u64,
    /// `None` only between an `Extract` taking the item and the end of that scan.
    item: Option<QueuedItem<K, T>>,
}

impl<K, T> Unschedulable<K, T> {
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The items, in unspecified order.
    pub(crate) fn items(&self) -> impl Iterator<Item = &QueuedItem<K, T>> {
        // Outside an `Extract`, no slot is empty.
        self.slots.iter().filter_map(|s| s.item.as_ref())
    }

    /// Removes the empty slots an `Extract` left and rebuilds the index from the stored hashes:
    /// a move's scan reads every slot anyway, so one more pass adds little to it.
    fn close_holes(&mut self) {
        self.slots.retain(|s| s.item.is_some());
        self.index.clear();
        let slots = &self.slots;
        for (pos, slot) in slots.iter().enumerate() {
            self.index.insert_unique(slot.hash, pos, |&p| slots[p].hash);
        }
    }
}

impl<K: Hash + Eq, T> Unschedulable<K, T> {
    pub(crate) fn new() -> Self {
        Unschedulable {
            slots: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn find(&self, hash: u64, key: &K) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(hash, |&p| {
                slots[p].item.as_ref().is_some_and(|i| i.key == *key)
            })
            .copied()
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.find(self.hasher.hash_one(key), key).is_some()
    }

    /// Inserts `item`, replacing an item with the same key.
    pub(crate) fn insert(&mut self, item: QueuedItem<K, T>) {
        let hash = self.hasher.hash_one(&item.key);
        if let Some(pos) = self.find(hash, &item.key) {
            self.slots[pos].item = Some(item);
            return;
        }
        let slots = &self.slots;
        self.index
            .insert_unique(hash, slots.len(), |&p| slots[p].hash);
        self.slots.push(Slot {
            hash,
            item: Some(item),
        });
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<QueuedItem<K, T>> {
        let hash = self.hasher.hash_one(key);
        let pos = self.find(hash, key)?;
        let found = self.index.find_entry(hash, |&p| p == pos);
        found.ok()?.remove();
        // The last slot takes the removed one's place, and its index entry follows it.
        let removed = self.slots.swap_remove(pos);
        let from = self.slots.len();
        if let Some(moved) = self.slots.get(pos)
            && let Some(p) = self.index.find_mut(moved.hash, |&p| p == from)
        {
            *p = pos;
        }
        removed.item
    }

    /// Removes the items `take` selects, lazily: each is taken out as the iterator reaches it,
    /// and items not yet reached stay if the iterator is dropped.
    pub(crate) fn extract<F>(&mut self, take: F) -> Extract<'_, K, T, F>
    where
        F: FnMut(&mut QueuedItem<K, T>) -> bool,
    {
        Extract {
            queue: self,
            take,
            next: 0,
            read_ahead: 0,
            holes: false,
        }
    }
}

/// The lazy scan of [`Unschedulable::extract`], in insertion order (so items that were queued
/// in order of their timestamps reach the destination heaps in that order, and each insertion
/// stays at the bottom of the heap). A taken item leaves a hole; the holes are closed when the
/// scan ends or is dropped (also by a panicking `take`), before anything else can see them.
pub(crate) struct Extract<'a, K, T, F> {
    queue: &'a mut Unschedulable<K, T>,
    take: F,
    /// Slots below `next` have been seen.
    next: usize,
    /// Slots below `read_ahead` have been read ahead.
    read_ahead: usize,
    holes: bool,
}

impl<K: Hash + Eq, T, F> Extract<'_, K, T, F> {
    /// Reads the bookkeeping and the key of the next [`BATCH`] slots in one pass, ahead of the
    /// decisions about them (see the module docs). The result goes to `black_box`, so the reads
    /// are not optimised away.
    fn read_ahead(&mut self) {
        let start = self.read_ahead;
        let end = (start + BATCH).min(self.queue.slots.len());
        let mut sum = 0u64;
        for slot in &self.queue.slots[start..end] {
            if let Some(item) = &slot.item {
                let inner = item.info();
                sum = sum
                    .wrapping_add(u64::from(inner.gating.is_some()))
                    .wrapping_add(u64::from(inner.consecutive_errors))
                    .wrapping_add(inner.rejectors.len() as u64)
                    .wrapping_add(inner.pending.len() as u64)
                    .wrapping_add(self.queue.hasher.hash_one(&item.key));
            }
        }
        black_box(sum);
        self.read_ahead = end;
    }
}

impl<K: Hash + Eq, T, F> Iterator for Extract<'_, K, T, F>
where
    F: FnMut(&mut QueuedItem<K, T>) -> bool,
{
    type Item = QueuedItem<K, T>;

    fn next(&mut self) -> Option<QueuedItem<K, T>> {
        while self.next < self.queue.slots.len() {
            if self.read_ahead <= self.next {
                self.read_ahead();
            }
            let slot = &mut self.queue.slots[self.next].item;
            self.next += 1;
            if slot.as_mut().is_some_and(|item| (self.take)(item)) {
                self.holes = true;
                return slot.take();
            }
        }
        None
    }
}

impl<K, T, F> Drop for Extract<'_, K, T, F> {
    fn drop(&mut self) {
        if self.holes {
            self.queue.close_holes();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use proptest::prelude::*;
    use tokio::time::Instant;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u32),
        Remove(u8),
        /// Take the keys `k % modulo == 0`, stopping after `stop` items, or panicking in the
        /// selector at its `panic_at`-th call.
        Extract {
            modulo: u8,
            stop: Option<usize>,
            panic_at: Option<usize>,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..40, any::<u32>()).prop_map(|(k, d)| Op::Insert(k, d)),
            2 => (0u8..40).prop_map(Op::Remove),
            1 => (
                1u8..5,
                proptest::option::of(0usize..20),
                proptest::option::weighted(0.2, 1usize..30)
            )
                .prop_map(|(modulo, stop, panic_at)| Op::Extract {
                    modulo,
                    stop,
                    panic_at
                }),
        ]
    }

    fn check(q: &Unschedulable<u8, u32>, model: &BTreeMap<u8, u32>) {
        assert_eq!(q.index.len(), q.slots.len());
        for (pos, slot) in q.slots.iter().enumerate() {
            let item = slot.item.as_ref().expect("no hole outside a scan");
            assert_eq!(slot.hash, q.hasher.hash_one(item.key));
            assert_eq!(q.find(slot.hash, &item.key), Some(pos));
        }
        let contents: BTreeMap<u8, u32> = q.items().map(|i| (i.key, i.data)).collect();
        assert_eq!(&contents, model);
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x0005_c4ed),
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::Direct(
                    "proptest-regressions/scheduling/unschedulable.txt",
                ),
            )),
            ..ProptestConfig::default()
        })]

        /// Random inserts, removals and (partial, panicking) extractions against a map: the
        /// index always finds every item at its position, and nothing is lost or duplicated.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..80)) {
            let mut q = Unschedulable::new();
            let mut model = BTreeMap::new();
            let now = Instant::now();
            for (seq, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k, d) => {
                        q.insert(QueuedItem::new(k, d, now, seq as u64));
                        model.insert(k, d);
                    }
                    Op::Remove(k) => {
                        assert_eq!(q.remove(&k).map(|i| i.data), model.remove(&k));
                    }
                    Op::Extract { modulo, stop, panic_at } => {
                        let mut taken = Vec::new();
                        let mut calls = 0;
                        let result = catch_unwind(AssertUnwindSafe(|| {
                            let picked = q.extract(|item| {
                                calls += 1;
                                assert_ne!(Some(calls), panic_at, "a selector that panics");
                                item.key % modulo == 0
                            });
                            for item in picked.take(stop.unwrap_or(usize::MAX)) {
                                taken.push((item.key, item.data));
                            }
                        }));
                        assert_eq!(result.is_err(), panic_at == Some(calls));
                        let matching = model.keys().filter(|k| *k % modulo == 0).count();
                        if result.is_ok() {
                            assert_eq!(taken.len(), matching.min(stop.unwrap_or(usize::MAX)));
                        }
                        for (k, d) in taken {
                            assert_eq!(k % modulo, 0);
                            assert_eq!(model.remove(&k), Some(d));
                        }
                    }
                }
                check(&q, &model);
            }
        }
    }

    #[test]
    fn extracting_everything_or_one_item_keeps_the_index_whole() {
        let now = Instant::now();
        let mut q = Unschedulable::new();
        for k in 0..100u8 {
            q.insert(QueuedItem::new(k, u32::from(k), now, 0));
        }
        let one: Vec<_> = q.extract(|i| i.key == 3).map(|i| i.key).collect();
        assert_eq!(one, [3]);
        let mut model: BTreeMap<u8, u32> = (0..100).map(|k| (k, u32::from(k))).collect();
        model.remove(&3);
        check(&q, &model);
        let all: Vec<_> = q.extract(|_| true).map(|i| i.key).collect();
        assert_eq!(all.len(), 99);
        check(&q, &BTreeMap::new());
        // A fresh queue is scanned in insertion order (the order of the timestamps).
        for k in 0..100u8 {
            q.insert(QueuedItem::new(k, 0, now, 0));
        }
        let all: Vec<_> = q.extract(|i| i.key % 2 == 0).map(|i| i.key).collect();
        assert_eq!(all, (0..100).step_by(2).collect::<Vec<u8>>());
        check(&q, &(1..100).step_by(2).map(|k| (k, 0)).collect());
    }
}
