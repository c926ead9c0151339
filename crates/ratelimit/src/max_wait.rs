//! [`WithMaxWaitRateLimiter`]: caps another limiter's delay.

use std::time::Duration;

use crate::{ConfigError, RateLimiter};

/// client-go's `WithMaxWaitRateLimiter`: the inner limiter's delay, capped at `max_wait`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{FastSlowRateLimiter, RateLimiter, WithMaxWaitRateLimiter};
///
/// let inner = FastSlowRateLimiter::new(Duration::from_secs(1), Duration::from_secs(1000), 0).unwrap();
/// let l = WithMaxWaitRateLimiter::new(inner, Duration::from_secs(500)).unwrap();
/// assert_eq!(l.when(&"a"), Duration::from_secs(500));
/// ```
#[derive(Debug)]
pub struct WithMaxWaitRateLimiter<L> {
    inner: L,
    max_wait: Duration,
}

impl<L> WithMaxWaitRateLimiter<L> {
    /// Caps `inner` at `max_wait`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`] if `max_wait` is zero (every delay would be zero).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{BucketRateLimiter, WithMaxWaitRateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let bucket = BucketRateLimiter::per_second(10, 1).unwrap();
    /// assert!(WithMaxWaitRateLimiter::new(bucket, Duration::ZERO).is_err());
    /// # }
    /// ```
    pub fn new(inner: L, max_wait: Duration) -> Result<Self, ConfigError> {
        if max_wait.is_zero() {
            return Err(ConfigError::ZeroDuration { name: "max_wait" });
        }
        Ok(Self { inner, max_wait })
    }
}

impl<K: ?Sized, L: RateLimiter<K>> RateLimiter<K> for WithMaxWaitRateLimiter<L> {
    fn when(&self, key: &K) -> Duration {
        self.inner.when(key).min(self.max_wait)
    }

    fn forget(&self, key: &K) {
        self.inner.forget(key)
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.inner.num_requeues(key)
    }
}
