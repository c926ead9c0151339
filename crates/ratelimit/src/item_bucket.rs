//! [`ItemBucketRateLimiter`]: one token bucket per key, idle buckets reclaimed.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::Quota;

use crate::bucket::{Direct, MAX_PERIOD, duration_ns, reserve};
use crate::clock::TokioClock;
use crate::shards::{DEFAULT_MAX_KEYS, Shards};
use crate::{ConfigError, RateLimiter};

/// One bucket and the instant it will be full again (governor's TAT, mirrored under the lock).
#[derive(Debug)]
struct Entry {
    limiter: Direct,
    /// Clock reading (ns) from which the bucket is full again.
    full_at: u64,
}

/// One token bucket per key (client-go v0.18's `ItemBucketRateLimiter`), each with the semantics
/// of [`BucketRateLimiter`](crate::BucketRateLimiter).
///
/// Memory is reclaimed two ways: `forget` drops the key's bucket, and every so often (after as
/// many calls as there are keys, at least 1024) `when` drops buckets that are full again, which
/// are indistinguishable from fresh ones, so reclaiming them changes no delay. The number of keys
/// is also capped (default 2^20; a full shard evicts an arbitrary bucket). `num_requeues` is
/// always 0, as in Go.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ratelimit::{ItemBucketRateLimiter, RateLimiter};
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
    quota: Quota,
    period_ns: u64,
    clock: TokioClock,
    buckets: Shards<K, Entry>,
    calls: AtomicUsize,
    next_sweep: AtomicUsize,
}

impl<K: Hash + Eq + Clone + Send + Sync> ItemBucketRateLimiter<K> {
    /// Per-key buckets refilled at `rate` per second, holding `burst`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] if `rate` or `burst` is zero. Rates above 10^9 per second are
    /// clamped to 10^9 (governor counts whole nanoseconds).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratelimit::ItemBucketRateLimiter;
    ///
    /// assert!(ItemBucketRateLimiter::<u64>::per_second(10, 0).is_err());
    /// ```
    pub fn per_second(rate: u32, burst: u32) -> Result<Self, ConfigError> {
        if rate == 0 {
            return Err(ConfigError::Zero { name: "rate" });
        }
        Self::with_period(
            (Duration::from_secs(1) / rate).max(Duration::from_nanos(1)),
            burst,
            DEFAULT_MAX_KEYS,
        )
    }

    /// Per-key buckets gaining a token every `period`, holding `burst`, at most about `max_keys`
    /// keys.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`], [`ConfigError::Zero`], [`ConfigError::PeriodTooLong`],
    /// [`ConfigError::ZeroCapacity`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::ItemBucketRateLimiter;
    ///
    /// assert!(ItemBucketRateLimiter::<u64>::with_period(Duration::from_millis(100), 5, 1000).is_ok());
    /// ```
    pub fn with_period(period: Duration, burst: u32, max_keys: usize) -> Result<Self, ConfigError> {
        let burst = NonZeroU32::new(burst).ok_or(ConfigError::Zero { name: "burst" })?;
        if period > MAX_PERIOD {
            return Err(ConfigError::PeriodTooLong {
                period,
                max: MAX_PERIOD,
            });
        }
        if max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        let quota = Quota::with_period(period)
            .ok_or(ConfigError::ZeroDuration { name: "period" })?
            .allow_burst(burst);
        Ok(Self {
            quota,
            period_ns: duration_ns(period),
            clock: TokioClock::new(),
            buckets: Shards::new(max_keys),
            calls: AtomicUsize::new(0),
            next_sweep: AtomicUsize::new(MIN_SWEEP_INTERVAL),
        })
    }

    /// Number of buckets held.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratelimit::{ItemBucketRateLimiter, RateLimiter};
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
    /// let l = ratelimit::ItemBucketRateLimiter::<u8>::per_second(10, 1).unwrap();
    /// assert!(l.is_empty());
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
    /// use ratelimit::{ItemBucketRateLimiter, RateLimiter};
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
        self.buckets.retain(|e| e.full_at > now);
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
        self.maybe_sweep();
        let now = self.clock.elapsed_ns();
        let delay = self.buckets.with_entry(
            key,
            || Entry {
                limiter: governor::RateLimiter::direct_with_clock(self.quota, self.clock),
                full_at: now,
            },
            |e| {
                let delay = reserve(&e.limiter, now);
                e.full_at = e.full_at.max(now + delay) + self.period_ns;
                delay
            },
        );
        Duration::from_nanos(delay)
    }

    fn forget(&self, key: &K) {
        self.buckets.remove(key);
    }

    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
}
