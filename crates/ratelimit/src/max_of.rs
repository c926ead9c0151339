//! [`MaxOfRateLimiter`]: the longest delay of several limiters.

use std::fmt;
use std::time::Duration;

use crate::{ConfigError, RateLimiter};

/// client-go's `MaxOfRateLimiter`: asks every child (so every counter advances and every bucket
/// is charged), returns the longest delay; `forget` forgets in all; `num_requeues` is the largest
/// of the children's.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ctrlq_ratelimit::{ExponentialRateLimiter, FastSlowRateLimiter, MaxOfRateLimiter, RateLimiter};
///
/// let ms = Duration::from_millis;
/// let l = MaxOfRateLimiter::of(FastSlowRateLimiter::new(ms(5), Duration::from_secs(3), 3).unwrap())
///     .and(ExponentialRateLimiter::new(ms(1), Duration::from_secs(1)).unwrap());
/// assert_eq!(l.when(&"a"), ms(5));
/// ```
pub struct MaxOfRateLimiter<K: ?Sized> {
    pub(crate) limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K: ?Sized> MaxOfRateLimiter<K> {
    /// A max-of limiter with one child; add more with [`and`](Self::and). The key type is
    /// inferred from the children, so no cast is needed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{BucketRateLimiter, ExponentialRateLimiter, MaxOfRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let ms = Duration::from_millis;
    /// let l = MaxOfRateLimiter::of(ExponentialRateLimiter::new(ms(5), Duration::from_secs(1000)).unwrap())
    ///     .and(BucketRateLimiter::per_second(10, 1).unwrap());
    /// assert_eq!(l.when(&"a"), ms(5));
    /// assert_eq!(l.when(&"b"), ms(100));
    /// # }
    /// ```
    pub fn of(first: impl RateLimiter<K> + 'static) -> Self {
        Self {
            limiters: vec![Box::new(first)],
        }
    }

    /// Adds a child.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{FastSlowRateLimiter, MaxOfRateLimiter, RateLimiter};
    ///
    /// let s = Duration::from_secs;
    /// let l = MaxOfRateLimiter::of(FastSlowRateLimiter::new(s(1), s(2), 0).unwrap())
    ///     .and(FastSlowRateLimiter::new(s(3), s(4), 0).unwrap());
    /// assert_eq!(l.when(&7), s(4));
    /// ```
    #[must_use]
    pub fn and(mut self, next: impl RateLimiter<K> + 'static) -> Self {
        self.limiters.push(Box::new(next));
        self
    }

    /// The maximum of `limiters` (a list built at run time; [`of`](Self::of) and
    /// [`and`](Self::and) infer the key type).
    ///
    /// # Errors
    ///
    /// [`ConfigError::NoLimiters`] if `limiters` is empty (it would always return zero: a hot
    /// loop).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::MaxOfRateLimiter;
    ///
    /// assert!(MaxOfRateLimiter::<str>::new(Vec::new()).is_err());
    /// ```
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Result<Self, ConfigError> {
        if limiters.is_empty() {
            return Err(ConfigError::NoLimiters);
        }
        Ok(Self { limiters })
    }
}

impl<K: ?Sized> fmt::Debug for MaxOfRateLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<K: ?Sized> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        // NOTE: no short-circuit: every child must record the failure.
        self.limiters
            .iter()
            .map(|l| l.when(key))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, key: &K) {
        for l in &self.limiters {
            l.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}
