//! [`FastSlowRateLimiter`]: a fast delay for the first attempts, then a slow one.

use std::hash::Hash;
use std::time::Duration;

use crate::bounded::{BoundedMap, DEFAULT_MAX_KEYS};
use crate::{ConfigError, RateLimiter};

/// client-go's `ItemFastSlowRateLimiter`: the first `max_fast_attempts` failures of a key wait
/// `fast`, later ones wait `slow`. Memory is bounded like
/// [`ExponentialRateLimiter`](crate::ExponentialRateLimiter) (default 2^20 keys).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{FastSlowRateLimiter, RateLimiter};
///
/// let l = FastSlowRateLimiter::new(Duration::from_millis(5), Duration::from_secs(10), 1).unwrap();
/// assert_eq!(l.when(&"a"), Duration::from_millis(5));
/// assert_eq!(l.when(&"a"), Duration::from_secs(10));
/// ```
#[derive(Debug)]
pub struct FastSlowRateLimiter<K> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    attempts: BoundedMap<K, u32>,
}

impl<K: Hash + Eq + Clone + Send + Sync> FastSlowRateLimiter<K> {
    /// `fast` for the first `max_fast_attempts` failures, then `slow`; at most 2^20 keys.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`] if `fast` or `slow` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::FastSlowRateLimiter;
    ///
    /// assert!(FastSlowRateLimiter::<u8>::new(Duration::ZERO, Duration::from_secs(1), 3).is_err());
    /// ```
    pub fn new(
        fast: Duration,
        slow: Duration,
        max_fast_attempts: u32,
    ) -> Result<Self, ConfigError> {
        Self::with_max_keys(fast, slow, max_fast_attempts, DEFAULT_MAX_KEYS)
    }

    /// Like [`new`](Self::new), tracking at most `max_keys` keys (a full map evicts a key not
    /// called for long, which restarts with fast delays).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), plus [`ConfigError::ZeroCapacity`] if `max_keys` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::FastSlowRateLimiter;
    ///
    /// let ms = Duration::from_millis;
    /// assert!(FastSlowRateLimiter::<u8>::with_max_keys(ms(1), ms(2), 3, 0).is_err());
    /// ```
    pub fn with_max_keys(
        fast: Duration,
        slow: Duration,
        max_fast_attempts: u32,
        max_keys: usize,
    ) -> Result<Self, ConfigError> {
        if fast.is_zero() {
            return Err(ConfigError::ZeroDuration { name: "fast" });
        }
        if slow.is_zero() {
            return Err(ConfigError::ZeroDuration { name: "slow" });
        }
        if max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(Self {
            fast,
            slow,
            max_fast_attempts,
            attempts: BoundedMap::new(max_keys),
        })
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
    /// use ctrlq_ratelimit::{FastSlowRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let survivors = || {
    ///     let l = FastSlowRateLimiter::with_max_keys(Duration::from_millis(1), Duration::from_secs(1), 3, 16).unwrap().with_hash_seed(7);
    ///     (0..100u32).for_each(|k| { l.when(&k); });
    ///     (0..100u32).filter(|k| l.num_requeues(k) > 0).collect::<Vec<_>>()
    /// };
    /// assert_eq!(survivors(), survivors());
    /// # }
    /// ```
    #[must_use]
    pub fn with_hash_seed(self, seed: u64) -> Self {
        Self {
            attempts: self.attempts.with_hash_seed(seed),
            ..self
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for FastSlowRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let n = self.attempts.with_entry(key, |n| {
            *n = n.saturating_add(1);
            *n
        });
        if n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, key: &K) {
        self.attempts.remove(key);
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.attempts.get(key, |n| *n as usize).unwrap_or(0)
    }
}
