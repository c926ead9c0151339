//! A sharded, bounded hash map for the per-item limiters.
//!
//! Keys hash (foldhash, once per call) to one of [`SHARDS`] mutex-protected tables, so two
//! threads working on different keys rarely contend; each shard sits on its own cache lines so
//! locking one does not slow the others. The total number of keys is bounded
//! (kubernetes/kubernetes#138743: client-go's failure maps grow forever when callers never
//! `forget`).
//!
//! # Which key a full shard evicts
//!
//! The least recently called of a sample (sampled LRU, as Redis evicts). Every call stamps its
//! entry with the shard's call count. A full shard looks at the next [`SAMPLE`] entries from a
//! hand that moves on over the table's buckets, and evicts the one called longest ago. Buckets
//! are laid out by hash, so the sample is a random one with respect to age: a key called within
//! the last quarter of the shard's calls is evicted only if all the others sampled are younger
//! still (about 1 chance in 4^7 = 16,384 each time it is sampled), so keys that keep failing keep
//! their state while keys seen once go. The hand resumes where it stopped, so each bucket is
//! looked at once per sweep: O(1) per call. The stamp fits in the padding of most entries
//! (`(u64, u32)` with a `u32` stamp is still 16 bytes), so memory per key is unchanged.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::SeedableRandomState;
use hashbrown::HashTable;

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// Entries compared by one eviction.
const SAMPLE: usize = 8;

/// The default bound on tracked keys per limiter.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// One shard, aligned so that neighbouring locks do not share a cache line.
#[derive(Debug)]
#[repr(align(128))]
struct Shard<K, V>(Mutex<Table<K, V>>);

/// A shard's table, its call count and its eviction hand.
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
    /// The shard's call count at this key's last call.
    stamp: u32,
}

#[derive(Debug)]
pub(crate) struct Shards<K, V> {
    hasher: SeedableRandomState,
    shards: Box<[Shard<K, V>]>,
    per_shard: usize,
}

impl<K: Hash + Eq + Clone, V> Shards<K, V> {
    /// A map holding at most about `max_keys` keys (rounded up to a multiple of the shard count).
    pub(crate) fn new(max_keys: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                Shard(Mutex::new(Table {
                    entries: HashTable::new(),
                    calls: 0,
                    hand: 0,
                }))
            })
            .collect();
        Self {
            hasher: hasher(),
            shards,
            per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// The hash of `key` and its shard, locked. A poisoned lock is recovered: the tables hold
    /// plain values that are never left half-updated.
    fn lock(&self, key: &K) -> (u64, MutexGuard<'_, Table<K, V>>) {
        let h = self.hasher.hash_one(key);
        // The top bits pick the shard; hashbrown uses the low and the top 7 bits inside it.
        let idx = (h >> 32) as usize % SHARDS;
        (h, lock(&self.shards[idx]))
    }

    /// Runs `f` on the value of `key`, inserting `init()` first if absent (evicting a key of a
    /// full shard, see the module docs).
    pub(crate) fn with_entry<R>(
        &self,
        key: &K,
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let (h, mut table) = self.lock(key);
        let stamp = table.calls;
        table.calls = stamp.wrapping_add(1);
        if let Some(e) = table.entries.find_mut(h, |e| e.key == *key) {
            e.stamp = stamp;
            return f(&mut e.value);
        }
        if table.entries.len() >= self.per_shard {
            table.evict_one();
        }
        let hasher = &self.hasher;
        let entry = Entry {
            key: key.clone(),
            value: init(),
            stamp,
        };
        let slot = table
            .entries
            .insert_unique(h, entry, |e| hasher.hash_one(&e.key));
        f(&mut slot.into_mut().value)
    }

    /// Removes `key`.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let (h, mut table) = self.lock(key);
        let entry = table.entries.find_entry(h, |e| e.key == *key).ok()?;
        Some(entry.remove().0.value)
    }

    /// Reads the value of `key` (a read does not count as a call for eviction).
    pub(crate) fn get<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let (h, table) = self.lock(key);
        table
            .entries
            .find(h, |e| e.key == *key)
            .map(|e| f(&e.value))
    }

    /// Keeps only the entries for which `keep` holds.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        for shard in self.shards.iter() {
            lock(shard).entries.retain(|e| keep(&e.value));
        }
    }

    /// Number of keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).entries.len()).sum()
    }
}

impl<K, V> Table<K, V> {
    /// Evicts the least recently called of the next [`SAMPLE`] entries from the hand.
    fn evict_one(&mut self) {
        let buckets = self.entries.num_buckets();
        let (hand, calls) = (self.hand, self.calls);
        let mut last = hand;
        // One lap at most; the table is not empty, so neither is the sample.
        let oldest = (hand..hand + buckets)
            .map(|i| i % buckets)
            .filter_map(|at| Some((at, calls.wrapping_sub(self.entries.get_bucket(at)?.stamp))))
            .take(SAMPLE)
            .inspect(|&(at, _)| last = at)
            .max_by_key(|&(_, age)| age);
        // The next sample starts where this one ended (that bucket is looked at twice, which
        // costs one comparison).
        self.hand = last;
        if let Some((at, age)) = oldest
            && let Ok(e) = self.entries.get_bucket_entry(at)
        {
            tracing::debug!(
                age,
                "per-item limiter full: evicting the least recently called key"
            );
            e.remove();
        }
    }
}

/// A randomly seeded hasher (crafted keys cannot collide on purpose), or with `test-util` a
/// fixed one, so that eviction tests are reproducible.
fn hasher() -> SeedableRandomState {
    if cfg!(feature = "test-util") {
        SeedableRandomState::fixed()
    } else {
        SeedableRandomState::random()
    }
}

/// Locks a shard. A poisoned lock is recovered: the tables hold plain values that are never left
/// half-updated.
fn lock<K, V>(shard: &Shard<K, V>) -> MutexGuard<'_, Table<K, V>> {
    shard.0.lock().unwrap_or_else(PoisonError::into_inner)
}
