//! A sharded, bounded `HashMap` for the per-item limiters.
//!
//! Keys hash (foldhash) to one of [`SHARDS`] mutex-protected maps, so two threads working on
//! different keys rarely contend. The total number of keys is bounded: a shard that is full
//! evicts one arbitrary entry before inserting (kubernetes/kubernetes#138743: client-go's failure
//! maps grow forever when callers never `forget`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// The default bound on tracked keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

#[derive(Debug)]
pub(crate) struct Shards<K, V> {
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<K, V, RandomState>>]>,
    per_shard: usize,
}

impl<K: Hash + Eq + Clone, V> Shards<K, V> {
    /// A map holding at most about `max_keys` keys (rounded up to a multiple of the shard count).
    pub(crate) fn new(max_keys: usize) -> Self {
        let hasher = RandomState::default();
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(HashMap::with_hasher(hasher.clone())))
            .collect();
        Self {
            hasher,
            shards,
            per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// The shard holding `key`, locked. A poisoned lock is recovered: the maps hold plain
    /// counters that are never left half-updated.
    pub(crate) fn lock(&self, key: &K) -> MutexGuard<'_, HashMap<K, V, RandomState>> {
        let h = self.hasher.hash_one(key);
        let idx = (h >> 59) as usize % SHARDS;
        self.shards[idx]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the value of `key`, inserting `init()` first if absent (evicting one arbitrary
    /// key of a full shard).
    pub(crate) fn with_entry<R>(
        &self,
        key: &K,
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let mut map = self.lock(key);
        if let Some(v) = map.get_mut(key) {
            return f(v);
        }
        if map.len() >= self.per_shard
            && let Some(victim) = map.keys().next().cloned()
        {
            tracing::debug!("per-item limiter full: evicting one key");
            map.remove(&victim);
        }
        f(map.entry(key.clone()).or_insert_with(init))
    }

    /// Removes `key`.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        self.lock(key).remove(key)
    }

    /// Reads the value of `key`.
    pub(crate) fn get<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        self.lock(key).get(key).map(f)
    }

    /// Keeps only the entries for which `keep` holds.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        for shard in self.shards.iter() {
            shard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|_, v| keep(v));
        }
    }

    /// Number of keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}
