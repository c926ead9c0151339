//! client-go's default limiters.

use std::hash::Hash;
use std::time::Duration;

use crate::bounded::DEFAULT_MAX_KEYS;
use crate::gcra::Gcra;
use crate::{BucketRateLimiter, ExponentialRateLimiter, MaxOfRateLimiter};

/// client-go's `DefaultControllerRateLimiter`: the maximum of per-item exponential backoff
/// (5 ms to 1000 s) and one overall bucket of 10 per second with burst 100.
///
/// The bucket reads tokio's clock, so build this inside (or after entering) a tokio runtime when
/// paused time must drive it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{RateLimiter, default_controller_rate_limiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let l = default_controller_rate_limiter::<String>();
/// let key = "default/pod-a".to_string();
/// assert_eq!(l.when(&key), Duration::from_millis(5));
/// assert_eq!(l.when(&key), Duration::from_millis(10));
/// assert_eq!(l.num_requeues(&key), 2);
/// # }
/// ```
pub fn default_controller_rate_limiter<K>() -> MaxOfRateLimiter<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let exp = ExponentialRateLimiter::new_unchecked(
        Duration::from_millis(5),
        Duration::from_secs(1000),
        DEFAULT_MAX_KEYS,
    );
    // 10/s, burst 100: a valid shape (see the `default_bucket_shape_is_valid` test).
    let bucket = BucketRateLimiter::from_gcra(DEFAULT_BUCKET, 100);
    MaxOfRateLimiter {
        limiters: vec![Box::new(exp), Box::new(bucket)],
    }
}

/// client-go's `DefaultItemBasedRateLimiter`: per-item exponential backoff from 1 ms to 1000 s.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{RateLimiter, default_item_based_rate_limiter};
///
/// let l = default_item_based_rate_limiter::<u64>();
/// assert_eq!(l.when(&7), Duration::from_millis(1));
/// assert_eq!(l.when(&7), Duration::from_millis(2));
/// ```
pub fn default_item_based_rate_limiter<K>() -> ExponentialRateLimiter<K>
where
    K: Hash + Eq + Clone + Send + Sync,
{
    ExponentialRateLimiter::new_unchecked(
        Duration::from_millis(1),
        Duration::from_secs(1000),
        DEFAULT_MAX_KEYS,
    )
}

/// client-go's default controller bucket, 10 per second with burst 100.
const DEFAULT_BUCKET: Gcra = Gcra::from_parts(100_000_000, 100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_bucket_shape_is_valid() {
        assert_eq!(Ok(DEFAULT_BUCKET), Gcra::per_second(10, 100));
    }
}
