//! A sharded, bounded hash map for the per-item limiters.
//!
//! Keys hash (foldhash, once per call) to one of [`SHARDS`] mutex-protected tables, so two
//! threads working on different keys rarely contend; each shard sits on its own cache lines so
//! locking one does not slow the others. The total number of keys is bounded: a shard that is
//! full evicts one arbitrary entry before inserting (kubernetes/kubernetes#138743: client-go's
//! failure maps grow forever when callers never `forget`).

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// The default bound on tracked keys per limiter.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// One shard, aligned so that neighbouring locks do not share a cache line.
#[derive(Debug)]
#[repr(align(128))]
struct Shard<K, V>(Mutex<HashTable<(K, V)>>);

#[derive(Debug)]
pub(crate) struct Shards<K, V> {
    hasher: RandomState,
    shards: Box<[Shard<K, V>]>,
    per_shard: usize,
}

impl<K: Hash + Eq + Clone, V> Shards<K, V> {
    /// A map holding at most about `max_keys` keys (rounded up to a multiple of the shard count).
    pub(crate) fn new(max_keys: usize) -> Self {
        let shards = (0..SHARDS)
            .map(|_| Shard(Mutex::new(HashTable::new())))
            .collect();
        Self {
            hasher: RandomState::default(),
            shards,
            per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// The hash of `key` and its shard, locked. A poisoned lock is recovered: the tables hold
    /// plain values that are never left half-updated.
    fn lock(&self, key: &K) -> (u64, MutexGuard<'_, HashTable<(K, V)>>) {
        let h = self.hasher.hash_one(key);
        // The top bits pick the shard; hashbrown uses the low and the top 7 bits inside it.
        let idx = (h >> 32) as usize % SHARDS;
        let guard = self.shards[idx]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (h, guard)
    }

    /// Runs `f` on the value of `key`, inserting `init()` first if absent (evicting one arbitrary
    /// key of a full shard).
    pub(crate) fn with_entry<R>(
        &self,
        key: &K,
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let (h, mut table) = self.lock(key);
        if let Some((_, v)) = table.find_mut(h, |(k, _)| k == key) {
            return f(v);
        }
        if table.len() >= self.per_shard {
            let victim = table.iter().next().map(|(k, _)| self.hasher.hash_one(k));
            if let Some(vh) = victim
                && let Ok(entry) = table.find_entry(vh, |_| true)
            {
                tracing::debug!("per-item limiter full: evicting one key");
                entry.remove();
            }
        }
        let hasher = &self.hasher;
        let entry = table.insert_unique(h, (key.clone(), init()), |(k, _)| hasher.hash_one(k));
        f(&mut entry.into_mut().1)
    }

    /// Removes `key`.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let (h, mut table) = self.lock(key);
        let entry = table.find_entry(h, |(k, _)| k == key).ok()?;
        Some(entry.remove().0.1)
    }

    /// Reads the value of `key`.
    pub(crate) fn get<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let (h, table) = self.lock(key);
        table.find(h, |(k, _)| k == key).map(|(_, v)| f(v))
    }

    /// Keeps only the entries for which `keep` holds.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        for shard in self.shards.iter() {
            shard
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|(_, v)| keep(v));
        }
    }

    /// Number of keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}
