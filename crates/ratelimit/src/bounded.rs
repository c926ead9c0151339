//! A bounded hash map for the per-item limiters: one table behind one lock, as client-go keeps
//! one map behind one mutex. The number of keys is bounded (kubernetes/kubernetes#138743:
//! client-go's failure maps grow forever when callers never `forget`). Keys are hashed
//! (foldhash) before the lock is taken.
//!
//! # Which key a full map evicts
//!
//! The least recently called of a sample (sampled LRU, as Redis evicts). Every call stamps its
//! entry with the map's call count. A full map looks at the next [`SAMPLE`] entries from a hand
//! that moves on over the table's buckets, and evicts the one called longest ago. Buckets are
//! laid out by hash, so the sample is a random one with respect to age: a key among the most
//! recently called fraction `f` of the map's keys is evicted only if the three others sampled
//! were called more recently still (about `f³` each time it is sampled), so keys that keep
//! failing keep their state while keys seen once go. The hand resumes where it stopped, so each
//! bucket is looked at once per sweep: O(1) per call. The stamp fits in the padding of most
//! entries (`(u64, u32)` with a `u32` stamp is still 16 bytes), so memory per key is unchanged.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

/// Entries compared by one eviction.
const SAMPLE: usize = 4;

/// The default bound on tracked keys per limiter.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// The table, its call count and its eviction hand.
#[derive(Debug)]
struct Table<K, V> {
    entries: HashTable<Entry<K, V>>,
    /// Calls so far (wrapping): the stamp of the next call.
    calls: u32,
    /// The bucket index the next eviction looks at first.
    hand: usize,
}

#[derive(Debug)]
struct Entry<K, V> {
    key: K,
    value: V,
    /// The map's call count at this key's last call.
    stamp: u32,
}

#[derive(Debug)]
pub(crate) struct BoundedMap<K, V> {
    hasher: SeedableRandomState,
    /// The lock does not poison: the table holds plain values that are never left half-updated.
    table: Mutex<Table<K, V>>,
    max_keys: usize,
    /// Keys tracked. Reads and forgets of a key find nothing to do while it is 0, the common
    /// case of a controller whose keys succeed, and return without hashing or locking.
    len: AtomicUsize,
}

impl<K: Hash + Eq + Clone, V: Default> BoundedMap<K, V> {
    /// A map holding at most `max_keys` keys (at least one).
    pub(crate) fn new(max_keys: usize) -> Self {
        let table = Table {
            entries: HashTable::new(),
            calls: 0,
            hand: 0,
        };
        Self {
            // Random per process and per map: crafted keys cannot collide on purpose.
            hasher: SeedableRandomState::random(),
            table: Mutex::new(table),
            max_keys: max_keys.max(1),
            len: AtomicUsize::new(0),
        }
    }

    /// The same map with a fixed hash seed and no keys: which keys a full map evicts is then the
    /// same on every run, which tests of eviction need.
    pub(crate) fn with_hash_seed(self, seed: u64) -> Self {
        Self {
            hasher: SeedableRandomState::with_seed(seed, SharedSeed::global_fixed()),
            ..Self::new(self.max_keys)
        }
    }

    /// The hash of `key`, and the table, locked.
    fn lock(&self, key: &K) -> (u64, MutexGuard<'_, Table<K, V>>) {
        (self.hasher.hash_one(key), self.table.lock())
    }

    /// Runs `f` on the value of `key`, inserting `V::default()` first if absent (evicting a key
    /// of a full map, see the module docs).
    pub(crate) fn with_entry<R>(&self, key: &K, f: impl FnOnce(&mut V) -> R) -> R {
        let (h, mut table) = self.lock(key);
        let stamp = table.calls;
        table.calls = stamp.wrapping_add(1);
        if let Some(e) = table.entries.find_mut(h, |e| e.key == *key) {
            e.stamp = stamp;
            return f(&mut e.value);
        }
        if !table.evict_if_full(self.max_keys) {
            self.len.fetch_add(1, Relaxed);
        }
        let entry = Entry {
            key: key.clone(),
            value: V::default(),
            stamp,
        };
        let hasher = &self.hasher;
        let slot = table
            .entries
            .insert_unique(h, entry, |e| hasher.hash_one(&e.key));
        f(&mut slot.into_mut().value)
    }

    /// Removes `key`.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        if self.is_empty() {
            return None;
        }
        let (h, mut table) = self.lock(key);
        let entry = table.entries.find_entry(h, |e| e.key == *key).ok()?;
        self.len.fetch_sub(1, Relaxed);
        Some(entry.remove().0.value)
    }

    /// Reads the value of `key` (a read does not count as a call for eviction).
    pub(crate) fn get<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        if self.is_empty() {
            return None;
        }
        let (h, table) = self.lock(key);
        table
            .entries
            .find(h, |e| e.key == *key)
            .map(|e| f(&e.value))
    }

    /// Keeps only the entries for which `keep` holds.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        let mut table = self.table.lock();
        let before = table.entries.len();
        table.entries.retain(|e| keep(&e.value));
        self.len.fetch_sub(before - table.entries.len(), Relaxed);
    }

    /// Number of keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Whether no key is tracked.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, V> Table<K, V> {
    /// With `max` entries or more, removes the least recently called of the next [`SAMPLE`]
    /// entries from the hand; whether it removed one.
    fn evict_if_full(&mut self, max: usize) -> bool {
        if self.entries.len() < max {
            return false;
        }
        let buckets = self.entries.num_buckets();
        let calls = self.calls;
        let mut at = self.hand % buckets;
        let mut oldest: Option<(usize, u32)> = None;
        let mut sampled = 0;
        // One lap at most; the table is not empty, so neither is the sample.
        for _ in 0..buckets {
            if let Some(e) = self.entries.get_bucket(at) {
                let age = calls.wrapping_sub(e.stamp);
                if oldest.is_none_or(|(_, a)| age > a) {
                    oldest = Some((at, age));
                }
                sampled += 1;
                if sampled == SAMPLE {
                    break;
                }
            }
            at += 1;
            if at == buckets {
                at = 0;
            }
        }
        // The next sample starts where this one ended (that bucket is looked at twice, which
        // costs one comparison).
        self.hand = at;
        let Some((at, age)) = oldest else {
            return false;
        };
        let Ok(e) = self.entries.get_bucket_entry(at) else {
            return false;
        };
        tracing::debug!(
            age,
            "per-item limiter full: evicting the least recently called key"
        );
        e.remove();
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{BoundedMap, SAMPLE};

    /// A seeded xorshift: the same calls on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// The key the next eviction of `map` removes, found the slow way: the least recently
    /// called of the first [`SAMPLE`] entries at or after the hand, wrapping; and the least
    /// recently called key of the whole map.
    fn next_victim(map: &BoundedMap<u64, u32>) -> (u64, u64) {
        let table = map.table.lock();
        let buckets = table.entries.num_buckets();
        let age = |stamp: u32| table.calls.wrapping_sub(stamp);
        let sample = (0..buckets)
            .filter_map(|i| table.entries.get_bucket((table.hand + i) % buckets))
            .take(SAMPLE);
        let sampled = sample.max_by_key(|e| age(e.stamp)).unwrap().key;
        let oldest = table
            .entries
            .iter()
            .max_by_key(|e| age(e.stamp))
            .unwrap()
            .key;
        (sampled, oldest)
    }

    /// Every eviction removes the key the module docs name, and only it: the least recently
    /// called of the next [`SAMPLE`] entries from the hand, wherever the hand is in its sweep.
    #[test]
    fn a_full_map_evicts_the_least_recently_called_of_the_sample_at_the_hand() {
        let max = 32;
        let map = BoundedMap::<u64, u32>::new(max).with_hash_seed(7);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut present: BTreeSet<u64> = (0..max as u64).collect();
        for key in &present {
            map.with_entry(key, |v| *v += 1);
        }
        let mut next = max as u64;
        let mut not_the_oldest = 0;
        for _ in 0..2_000 {
            if rng.below(3) == 0 {
                // A key called again: its stamp is the newest, nothing is evicted.
                let key = *present.iter().nth(rng.below(max as u64) as usize).unwrap();
                let calls = map.with_entry(&key, |v| {
                    *v += 1;
                    *v
                });
                assert!(calls >= 2, "key {key} kept its value");
                assert_eq!(map.len(), max);
                continue;
            }
            let (victim, oldest) = next_victim(&map);
            not_the_oldest += usize::from(victim != oldest);
            assert_eq!(map.with_entry(&next, |v| std::mem::replace(v, 1)), 0);
            assert!(present.remove(&victim));
            present.insert(next);
            next += 1;
            assert_eq!(map.len(), max);
            assert_eq!(map.get(&victim, |v| *v), None, "key {victim} evicted");
            for key in &present {
                assert!(map.get(key, |_| ()).is_some(), "key {key} kept");
            }
        }
        // The sample, not the whole map: some evictions were not of the map's oldest key.
        assert!(not_the_oldest > 0);
    }
}
