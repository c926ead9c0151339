//! A striped, bounded hash map for the per-item limiters.
//!
//! Keys hash (foldhash, once per call) to one of [`STRIPES`] mutex-protected tables, so two
//! threads working on different keys rarely contend; each stripe sits on its own cache lines so
//! locking one does not slow the others. The total number of keys is bounded
//! (kubernetes/kubernetes#138743: client-go's failure maps grow forever when callers never
//! `forget`).
//!
//! # Which key a full stripe evicts
//!
//! The least recently called of a sample (sampled LRU, as Redis evicts). Every call stamps its
//! entry with the stripe's call count. A full stripe looks at the next [`SAMPLE`] entries from a
//! hand that moves on over the table's buckets, and evicts the one called longest ago. Buckets
//! are laid out by hash, so the sample is a random one with respect to age: a key among the most
//! recently called fraction `f` of the stripe's keys is evicted only if the three others sampled
//! were called more recently still (about `f³` each time it is sampled: 1 in 64 for the most
//! recent quarter, 1 in a million for the most recent hundredth), so keys that keep failing keep
//! their state while keys seen once go. The hand resumes where it stopped, so each bucket is
//! looked at once per sweep: O(1) per call. The evicted entry's key is overwritten with the new
//! key by `clone_from`, which reuses its allocation where the key type can (`String` does). The stamp fits in the padding of most entries
//! (`(u64, u32)` with a `u32` stamp is still 16 bytes), so memory per key is unchanged.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

/// Number of stripes (a power of two).
const STRIPES: usize = 16;

/// Entries compared by one eviction.
const SAMPLE: usize = 4;

/// The default bound on tracked keys per limiter.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// One stripe, padded so that neighbouring locks do not share a cache line.
type Stripe<K, V> = CachePadded<Mutex<Table<K, V>>>;

/// A stripe's table, its call count and its eviction hand.
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
    /// The stripe's call count at this key's last call.
    stamp: u32,
}

#[derive(Debug)]
pub(crate) struct Stripes<K, V> {
    hasher: SeedableRandomState,
    stripes: Box<[Stripe<K, V>]>,
    per_stripe: usize,
    /// Keys tracked over all stripes. Reads and forgets of a key find nothing to do while it is
    /// 0, the common case of a controller whose keys succeed, and return without hashing or
    /// locking.
    len: AtomicUsize,
}

impl<K: Hash + Eq + Clone, V> Stripes<K, V> {
    /// A map holding at most about `max_keys` keys (rounded up to a multiple of the stripe count).
    pub(crate) fn new(max_keys: usize) -> Self {
        let stripes = (0..STRIPES)
            .map(|_| {
                CachePadded::new(Mutex::new(Table {
                    entries: HashTable::new(),
                    calls: 0,
                    hand: 0,
                }))
            })
            .collect();
        Self {
            // Random per process and per map: crafted keys cannot collide on purpose.
            hasher: SeedableRandomState::random(),
            stripes,
            per_stripe: max_keys.div_ceil(STRIPES).max(1),
            len: AtomicUsize::new(0),
        }
    }

    /// The same map with a fixed hash seed and no keys: which keys a full map evicts is then the
    /// same on every run, which tests of eviction need.
    pub(crate) fn with_hash_seed(self, seed: u64) -> Self {
        let max_keys = self.per_stripe * STRIPES;
        Self {
            hasher: SeedableRandomState::with_seed(seed, SharedSeed::global_fixed()),
            ..Self::new(max_keys)
        }
    }

    /// The hash of `key` and its stripe, locked.
    fn lock(&self, key: &K) -> (u64, MutexGuard<'_, Table<K, V>>) {
        let h = self.hasher.hash_one(key);
        // The top bits pick the stripe; hashbrown uses the low and the top 7 bits inside it.
        let idx = (h >> 32) as usize % STRIPES;
        (h, lock(&self.stripes[idx]))
    }

    /// Runs `f` on the value of `key`, inserting `init()` first if absent (evicting a key of a
    /// full stripe, see the module docs).
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
        // A full stripe's evicted entry is reused: `clone_from` keeps the old key's allocation
        // where the key type can (a `String` does), so churn at capacity allocates nothing.
        let entry = match table.evict_if_full(self.per_stripe) {
            Some(mut old) => {
                old.key.clone_from(key);
                old.value = init();
                old.stamp = stamp;
                old
            }
            None => {
                self.len.fetch_add(1, Relaxed);
                Entry {
                    key: key.clone(),
                    value: init(),
                    stamp,
                }
            }
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
        for stripe in self.stripes.iter() {
            let mut table = lock(stripe);
            let before = table.entries.len();
            table.entries.retain(|e| keep(&e.value));
            self.len.fetch_sub(before - table.entries.len(), Relaxed);
        }
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
    /// With `max` entries or more, removes and returns the least recently called of the next
    /// [`SAMPLE`] entries from the hand.
    fn evict_if_full(&mut self, max: usize) -> Option<Entry<K, V>> {
        if self.entries.len() < max {
            return None;
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
        let (at, age) = oldest?;
        let e = self.entries.get_bucket_entry(at).ok()?;
        tracing::debug!(
            age,
            "per-item limiter full: evicting the least recently called key"
        );
        Some(e.remove().0)
    }
}

/// Locks a stripe (the lock does not poison: the tables hold plain values that are never left
/// half-updated).
fn lock<K, V>(stripe: &Stripe<K, V>) -> MutexGuard<'_, Table<K, V>> {
    stripe.lock()
}
