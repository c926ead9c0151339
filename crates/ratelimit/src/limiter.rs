//! The [`RateLimiter`] trait shared by every limiter in this crate.

use std::sync::Arc;
use std::time::Duration;

/// Decides how long a failed key waits before it is retried.
///
/// A port of client-go's `workqueue.TypedRateLimiter`. Implementations are `Send + Sync` and the
/// trait is object safe, so a limiter can be shared as `Arc<dyn RateLimiter<K>>`. Blanket impls
/// make `Arc<L>`, `Box<L>` and `&L` limiters too.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ctrlq_ratelimit::RateLimiter;
///
/// /// Always waits one second; tracks nothing.
/// struct OneSecond;
///
/// impl RateLimiter<str> for OneSecond {
///     fn when(&self, _key: &str) -> Duration {
///         Duration::from_secs(1)
///     }
///     fn forget(&self, _key: &str) {}
///     fn num_requeues(&self, _key: &str) -> usize {
///         0
///     }
/// }
///
/// let limiter: Arc<dyn RateLimiter<str>> = Arc::new(OneSecond);
/// assert_eq!(limiter.when("pod-a"), Duration::from_secs(1));
/// assert_eq!(limiter.num_requeues("pod-a"), 0);
/// ```
pub trait RateLimiter<K: ?Sized>: Send + Sync {
    /// Records a failure of `key` (or takes a token) and returns how long to wait before retrying.
    fn when(&self, key: &K) -> Duration;
    /// Stops tracking `key` (its failures are forgotten).
    fn forget(&self, key: &K);
    /// How many failures of `key` are being tracked.
    fn num_requeues(&self, key: &K) -> usize;
}

impl<K: ?Sized, L: RateLimiter<K> + ?Sized> RateLimiter<K> for Arc<L> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> usize {
        (**self).num_requeues(key)
    }
}

impl<K: ?Sized, L: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<L> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> usize {
        (**self).num_requeues(key)
    }
}

impl<K: ?Sized, L: RateLimiter<K> + ?Sized> RateLimiter<K> for &L {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> usize {
        (**self).num_requeues(key)
    }
}
