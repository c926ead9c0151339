//! Bad parameters are typed errors, never panics or zero delays.

use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ConfigError, ExponentialRateLimiter, FastSlowRateLimiter,
    ItemBucketRateLimiter, MAX_PERIOD, MaxOfRateLimiter, WithMaxWaitRateLimiter,
};

const S: Duration = Duration::from_secs(1);

#[test]
fn exponential_rejects_zero_base_and_base_above_max() {
    assert_eq!(
        ExponentialRateLimiter::<u8>::new(Duration::ZERO, S).unwrap_err(),
        ConfigError::ZeroDuration { name: "base" }
    );
    assert_eq!(
        ExponentialRateLimiter::<u8>::new(2 * S, S).unwrap_err(),
        ConfigError::BaseAboveMax {
            base: 2 * S,
            max: S
        }
    );
    assert_eq!(
        ExponentialRateLimiter::<u8>::with_max_keys(S, S, 0).unwrap_err(),
        ConfigError::ZeroCapacity
    );
    assert!(ExponentialRateLimiter::<u8>::new(S, S).is_ok());
}

#[test]
fn fast_slow_rejects_zero_delays() {
    assert!(FastSlowRateLimiter::<u8>::new(Duration::ZERO, S, 1).is_err());
    assert!(FastSlowRateLimiter::<u8>::new(S, Duration::ZERO, 1).is_err());
}

#[test]
fn max_of_rejects_no_children_and_max_wait_rejects_zero() {
    assert_eq!(
        MaxOfRateLimiter::<u8>::new(Vec::new()).unwrap_err(),
        ConfigError::NoLimiters
    );
    let inner = ExponentialRateLimiter::<u8>::new(S, S).unwrap();
    assert!(WithMaxWaitRateLimiter::new(inner, Duration::ZERO).is_err());
}

#[tokio::test(start_paused = true)]
async fn buckets_reject_zero_rate_burst_period_and_huge_periods() {
    assert_eq!(
        BucketRateLimiter::per_second(0, 1).unwrap_err(),
        ConfigError::Zero { name: "rate" }
    );
    assert_eq!(
        BucketRateLimiter::per_second(1, 0).unwrap_err(),
        ConfigError::Zero { name: "burst" }
    );
    assert!(BucketRateLimiter::with_period(Duration::ZERO, 1).is_err());
    assert!(matches!(
        BucketRateLimiter::with_period(MAX_PERIOD + S, 1),
        Err(ConfigError::PeriodTooLong { .. })
    ));
    assert!(BucketRateLimiter::with_period(Duration::MAX, 1).is_err());
    assert!(BucketRateLimiter::per_second(u32::MAX, 1).is_ok());
    assert!(ItemBucketRateLimiter::<u8>::per_second(0, 1).is_err());
    assert!(ItemBucketRateLimiter::<u8>::with_max_keys(S, 1, 0).is_err());
}

#[tokio::test(start_paused = true)]
async fn bucket_debt_is_clamped_at_max_reservation() {
    let b = BucketRateLimiter::with_period(MAX_PERIOD, 1).unwrap();
    let mut prev = Duration::ZERO;
    for _ in 0..400 {
        let d = b.reserve();
        assert!(d >= prev && d <= ctrlq_ratelimit::MAX_DELAY);
        prev = d;
    }
    assert_eq!(prev, ctrlq_ratelimit::MAX_DELAY);
}

#[test]
fn errors_display_lowercase_messages() {
    assert_eq!(
        ConfigError::NoLimiters.to_string(),
        "a max-of limiter needs at least one child"
    );
}
