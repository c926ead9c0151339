//! [`ExponentialRateLimiter`]: per-item `base · 2^failures`, capped at `max`.

use std::hash::Hash;
use std::time::Duration;

use crate::bounded::{BoundedMap, DEFAULT_MAX_KEYS};
use crate::{ConfigError, RateLimiter};

/// Per-item exponential backoff: client-go's `ItemExponentialFailureRateLimiter`.
///
/// The n-th `when` of a key (counting from 0) returns `min(base · 2^n, max)`
/// ([`capped_exponential`](crate::capped_exponential)). The arithmetic is integer and
/// saturating: 1000 failures give `max`, never an overflowed zero (kubernetes/kubernetes#31396).
/// `forget` resets the key.
///
/// Memory is bounded: at most [`max_keys`](Self::with_max_keys) keys (default 2^20, about
/// 34 bytes each beside the key's own heap data) are tracked. A full map evicts the least
/// recently called of a sample of keys (it restarts at `base`), so keys that keep failing keep
/// their backoff while keys that stopped failing go. The map is one table behind one lock, as
/// client-go's.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{ExponentialRateLimiter, RateLimiter};
///
/// let ms = Duration::from_millis;
/// let limiter = ExponentialRateLimiter::new(ms(1), Duration::from_secs(1)).unwrap();
/// assert_eq!(limiter.when(&"a"), ms(1));
/// assert_eq!(limiter.when(&"a"), ms(2));
/// assert_eq!(limiter.when(&"a"), ms(4));
/// assert_eq!(limiter.num_requeues(&"a"), 3);
/// limiter.forget(&"a");
/// assert_eq!(limiter.when(&"a"), ms(1));
/// ```
#[derive(Debug)]
pub struct ExponentialRateLimiter<K> {
    base_ns: u128,
    /// The failures after which the backoff is `max`: below it, `base · 2^failures < max`.
    cap_exp: u32,
    max: Duration,
    failures: BoundedMap<K, u32>,
}

impl<K: Hash + Eq + Clone + Send + Sync> ExponentialRateLimiter<K> {
    /// Backoff from `base` doubling up to `max`, tracking at most 2^20 keys.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`] if `base` is zero, [`ConfigError::BaseAboveMax`] if
    /// `base > max`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::ExponentialRateLimiter;
    ///
    /// assert!(ExponentialRateLimiter::<u64>::new(Duration::ZERO, Duration::from_secs(1)).is_err());
    /// ```
    pub fn new(base: Duration, max: Duration) -> Result<Self, ConfigError> {
        Self::with_max_keys(base, max, DEFAULT_MAX_KEYS)
    }

    /// Like [`new`](Self::new), tracking at most `max_keys` keys; a full map evicts a key not
    /// called for long, which then restarts at `base`.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), plus [`ConfigError::ZeroCapacity`] if `max_keys` is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{ExponentialRateLimiter, RateLimiter};
    ///
    /// let l = ExponentialRateLimiter::with_max_keys(Duration::from_millis(1), Duration::from_secs(1), 16)
    ///     .unwrap();
    /// for i in 0..1000u32 {
    ///     l.when(&i);
    /// }
    /// assert!(l.len() <= 16);
    /// ```
    pub fn with_max_keys(
        base: Duration,
        max: Duration,
        max_keys: usize,
    ) -> Result<Self, ConfigError> {
        if base.is_zero() {
            return Err(ConfigError::ZeroDuration { name: "base" });
        }
        if base > max {
            return Err(ConfigError::BaseAboveMax { base, max });
        }
        if max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(Self::new_unchecked(base, max, max_keys))
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
    /// use ctrlq_ratelimit::{ExponentialRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let survivors = || {
    ///     let l = ExponentialRateLimiter::with_max_keys(Duration::from_millis(1), Duration::from_secs(1), 16).unwrap().with_hash_seed(7);
    ///     (0..100u32).for_each(|k| { l.when(&k); });
    ///     (0..100u32).filter(|k| l.num_requeues(k) > 0).collect::<Vec<_>>()
    /// };
    /// assert_eq!(survivors(), survivors());
    /// # }
    /// ```
    #[must_use]
    pub fn with_hash_seed(self, seed: u64) -> Self {
        Self {
            failures: self.failures.with_hash_seed(seed),
            ..self
        }
    }

    /// Builds without validation; callers guarantee `0 < base <= max` and `max_keys > 0`.
    pub(crate) fn new_unchecked(base: Duration, max: Duration, max_keys: usize) -> Self {
        let (base_ns, max_ns) = (base.as_nanos(), max.as_nanos());
        // The first exponent at which the doubling reaches `max` or would shift a bit out.
        let mut cap_exp = 0;
        while cap_exp < base_ns.leading_zeros() && base_ns << cap_exp < max_ns {
            cap_exp += 1;
        }
        Self {
            base_ns,
            cap_exp,
            max,
            failures: BoundedMap::new(max_keys),
        }
    }

    /// Number of keys tracked.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{ExponentialRateLimiter, RateLimiter};
    ///
    /// let l = ExponentialRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap();
    /// l.when(&1);
    /// assert_eq!(l.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.failures.len()
    }

    /// Whether no key is tracked.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::ExponentialRateLimiter;
    ///
    /// let l = ExponentialRateLimiter::<u8>::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap();
    /// assert!(l.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `min(base · 2^exponent, max)`, computed without overflow: capped exponential backoff.
///
/// The product is taken in 128-bit nanoseconds, so no exponent overflows or wraps to zero
/// (kubernetes/kubernetes#31396): once `base · 2^exponent` passes `max` the result is `max`, for
/// every exponent up to `u32::MAX`. A `base` above `max` gives `max`, a zero `base` zero. This is
/// the arithmetic of [`ExponentialRateLimiter`], whose n-th failure (counting from 0) waits
/// `capped_exponential(base, max, n)`; a backoff of the form `base · 2^(n − 1)` for the n-th
/// failure (counting from 1) is `capped_exponential(base, max, n − 1)`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::capped_exponential;
///
/// let (base, max) = (Duration::from_millis(1), Duration::from_secs(1));
/// assert_eq!(capped_exponential(base, max, 0), Duration::from_millis(1));
/// assert_eq!(capped_exponential(base, max, 3), Duration::from_millis(8));
/// assert_eq!(capped_exponential(base, max, 10), Duration::from_secs(1));
/// assert_eq!(capped_exponential(base, max, u32::MAX), Duration::from_secs(1));
/// // Tiny bases are not truncated to 32 bits: 1 ns · 2^32.
/// assert_eq!(
///     capped_exponential(Duration::from_nanos(1), Duration::MAX, 32),
///     Duration::from_nanos(1 << 32)
/// );
/// ```
#[must_use]
pub fn capped_exponential(base: Duration, max: Duration, exponent: u32) -> Duration {
    backoff(base.as_nanos(), max.as_nanos(), exponent)
}

/// [`capped_exponential`] on nanosecond counts (at most `Duration::MAX`'s), so the limiter
/// converts its parameters once instead of on every call.
pub(crate) fn backoff(base_ns: u128, max_ns: u128, exp: u32) -> Duration {
    // While `exp` is below the base's leading zeros the shift keeps every bit; from there on
    // the product is at least 2^127, far above any max (a Duration is below 2^94 ns). A zero
    // base stays 0. A shift and a compare, cheaper than a checked 128-bit multiply.
    let ns = if exp < base_ns.leading_zeros() {
        (base_ns << exp).min(max_ns)
    } else if base_ns == 0 {
        0
    } else {
        max_ns
    };
    nanos_to_duration(ns)
}

/// A nanosecond count that fits a `Duration` (it is at most a `Duration`'s own `as_nanos`).
pub(crate) fn nanos_to_duration(ns: u128) -> Duration {
    // Every delay below 584 years fits 64 bits, where dividing by the constant compiles to a
    // multiply; a 128-bit division is a call into a software routine (a third of `when`).
    if let Ok(ns) = u64::try_from(ns) {
        return Duration::from_nanos(ns);
    }
    const NS: u128 = 1_000_000_000;
    let secs = u64::try_from(ns / NS).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % NS) as u32)
}

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for ExponentialRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let exp = self.failures.with_entry(key, |n| {
            let exp = *n;
            *n = n.saturating_add(1);
            exp
        });
        // `backoff`'s result, with the cap's exponent found once at construction.
        if exp < self.cap_exp {
            nanos_to_duration(self.base_ns << exp)
        } else {
            self.max
        }
    }

    fn forget(&self, key: &K) {
        self.failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.failures.get(key, |n| *n as usize).unwrap_or(0)
    }
}
