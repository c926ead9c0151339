//! [`ItemBucketRateLimiter`]: one token bucket per key, idle buckets reclaimed.

use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::bounded::{BoundedMap, DEFAULT_MAX_KEYS};
use crate::clock::TokioClock;
use crate::gcra::{Gcra, claim_delay};
use crate::{ConfigError, RateLimiter};

/// One token bucket per key (client-go v0.18's `ItemBucketRateLimiter`), each with the semantics
/// of [`BucketRateLimiter`](crate::BucketRateLimiter).
///
/// A key's bucket is one instant (its theoretical arrival time), stored in the map beside the
/// key. Memory is reclaimed two ways: `forget` drops the key's bucket, and every so
/// often (after as many calls as there are keys, at least 1024) `when` drops buckets that are
/// full again, which are indistinguishable from fresh ones, so reclaiming them changes no delay.
/// The number of keys is also capped (default 2^20, about 50 bytes each beside the key's own heap
/// data); a full map evicts the least recently called of a sample of keys, so keys that keep
/// failing keep their debt. `num_requeues` is always 0, as in Go.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let l = ItemBucketRateLimiter::per_second(1, 1).unwrap();
/// assert_eq!(l.when(&"a"), Duration::ZERO);
/// assert_eq!(l.when(&"a"), Duration::from_secs(1));
/// assert_eq!(l.when(&"b"), Duration::ZERO);
/// # }
/// ```
#[derive(Debug)]
pub struct ItemBucketRateLimiter<K> {
    gcra: Gcra,
    clock: TokioClock,
    /// Each key's theoretical arrival time, in clock nanoseconds.
    buckets: BoundedMap<K, u64>,
    calls: AtomicUsize,
    next_sweep: AtomicUsize,
}

impl<K: Hash + Eq + Clone + Send + Sync> ItemBucketRateLimiter<K> {
    /// Per-key buckets refilled at `rate` per second, holding `burst`, at most 2^20 keys.
    ///
    /// # Errors
    ///
    /// As [`BucketRateLimiter::per_second`](crate::BucketRateLimiter::per_second).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::ItemBucketRateLimiter;
    ///
    /// assert!(ItemBucketRateLimiter::<u64>::per_second(10, 0).is_err());
    /// ```
    pub fn per_second(rate: u32, burst: u32) -> Result<Self, ConfigError> {
        Gcra::per_second(rate, burst).map(|g| Self::from_gcra(g, DEFAULT_MAX_KEYS))
    }

    /// Per-key buckets refilled at a fractional `rate` per second (`f64::INFINITY`: never
    /// wait), holding `burst`, at most 2^20 keys.
    ///
    /// # Errors
    ///
    /// As [`BucketRateLimiter::with_rate`](crate::BucketRateLimiter::with_rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let l = ItemBucketRateLimiter::with_rate(0.5, 1).unwrap();
    /// assert_eq!(l.when(&1), Duration::ZERO);
    /// assert_eq!(l.when(&1), Duration::from_secs(2));
    /// # }
    /// ```
    pub fn with_rate(rate: f64, burst: u32) -> Result<Self, ConfigError> {
        Gcra::per_second_f64(rate, burst).map(|g| Self::from_gcra(g, DEFAULT_MAX_KEYS))
    }

    /// Per-key buckets gaining a token every `period`, holding `burst`, at most 2^20 keys.
    ///
    /// # Errors
    ///
    /// As [`BucketRateLimiter::with_period`](crate::BucketRateLimiter::with_period).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::ItemBucketRateLimiter;
    ///
    /// assert!(ItemBucketRateLimiter::<u64>::with_period(Duration::from_millis(100), 5).is_ok());
    /// ```
    pub fn with_period(period: Duration, burst: u32) -> Result<Self, ConfigError> {
        Self::with_max_keys(period, burst, DEFAULT_MAX_KEYS)
    }

    /// Like [`with_period`](Self::with_period), tracking at most `max_keys` keys.
    ///
    /// # Errors
    ///
    /// As [`with_period`](Self::with_period), plus [`ConfigError::ZeroCapacity`] if `max_keys` is
    /// zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::ItemBucketRateLimiter;
    ///
    /// let ms = Duration::from_millis;
    /// assert!(ItemBucketRateLimiter::<u64>::with_max_keys(ms(100), 5, 1000).is_ok());
    /// assert!(ItemBucketRateLimiter::<u64>::with_max_keys(ms(100), 5, 0).is_err());
    /// ```
    pub fn with_max_keys(
        period: Duration,
        burst: u32,
        max_keys: usize,
    ) -> Result<Self, ConfigError> {
        let gcra = Gcra::with_period(period, burst)?;
        if max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(Self::from_gcra(gcra, max_keys))
    }

    /// The same limiter with a fixed hash seed for its per-key map, and no keys tracked: which
    /// keys a full map evicts is then the same on every run. For tests of eviction only: a seed
    /// known outside the process lets crafted keys collide in its table, so production code
    /// keeps the random seed every constructor picks. Affects this limiter alone.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let survivors = || {
    ///     let l = ItemBucketRateLimiter::with_max_keys(Duration::from_millis(100), 1, 16).unwrap().with_hash_seed(7);
    ///     (0..100u32).for_each(|k| { l.when(&k); });
    ///     (0..100u32).filter(|k| l.num_requeues(k) > 0).collect::<Vec<_>>()
    /// };
    /// assert_eq!(survivors(), survivors());
    /// # }
    /// ```
    #[must_use]
    pub fn with_hash_seed(self, seed: u64) -> Self {
        Self {
            buckets: self.buckets.with_hash_seed(seed),
            ..self
        }
    }

    fn from_gcra(gcra: Gcra, max_keys: usize) -> Self {
        Self {
            gcra,
            clock: TokioClock::new(),
            buckets: BoundedMap::new(max_keys),
            calls: AtomicUsize::new(0),
            next_sweep: AtomicUsize::new(MIN_SWEEP_INTERVAL),
        }
    }

    /// Number of buckets held.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let l = ItemBucketRateLimiter::per_second(10, 1).unwrap();
    /// l.when(&1);
    /// assert_eq!(l.len(), 1);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no bucket is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let l = ItemBucketRateLimiter::per_second(10, 1).unwrap();
    /// assert!(l.is_empty());
    /// l.when(&1);
    /// assert!(!l.is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every bucket that is full at tokio's current instant (no delay changes).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{ItemBucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let l = ItemBucketRateLimiter::per_second(10, 1).unwrap();
    /// l.when(&1);
    /// tokio::time::advance(Duration::from_millis(100)).await;
    /// l.retain_recent();
    /// assert!(l.is_empty());
    /// # }
    /// ```
    pub fn retain_recent(&self) {
        let now = self.clock.elapsed_ns();
        // A bucket whose arrival time has passed holds its full burst: a fresh one.
        self.buckets.retain(|tat| *tat > now);
    }

    fn maybe_sweep(&self) {
        let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if calls < self.next_sweep.load(Ordering::Relaxed) {
            return;
        }
        self.calls.store(0, Ordering::Relaxed);
        self.retain_recent();
        let next = self.len().max(MIN_SWEEP_INTERVAL);
        self.next_sweep.store(next, Ordering::Relaxed);
        tracing::debug!(kept = next, "item bucket sweep");
    }
}

/// Fewest calls between two idle sweeps.
const MIN_SWEEP_INTERVAL: usize = 1024;

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for ItemBucketRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        if self.gcra.is_unlimited() {
            // Go's `rate.Inf`: free, and nothing to remember.
            return Duration::ZERO;
        }
        self.maybe_sweep();
        let now = self.clock.elapsed_ns();
        let claim = self.buckets.with_entry(key, |tat| {
            let claim = self.gcra.claim(*tat, now);
            if let Some((_, next)) = claim {
                *tat = next;
            }
            claim
        });
        claim_delay(claim)
    }

    fn forget(&self, key: &K) {
        self.buckets.remove(key);
    }

    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
}
