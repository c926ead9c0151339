//! The exact sequences of client-go's `default_rate_limiters_test.go`.

use std::time::Duration;

use ctrlq_ratelimit::{
    ExponentialRateLimiter, FastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    WithMaxWaitRateLimiter,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn exponential_doubles_per_key_and_forget_resets() {
    let l = ExponentialRateLimiter::new(ms(1), Duration::from_secs(1)).unwrap();
    for want in [1, 2, 4, 8, 16] {
        assert_eq!(l.when(&"one"), ms(want));
    }
    assert_eq!(l.num_requeues(&"one"), 5);
    assert_eq!(l.when(&"two"), ms(1));
    assert_eq!(l.when(&"two"), ms(2));
    assert_eq!(l.num_requeues(&"two"), 2);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), ms(1));
}

#[test]
fn exponential_overflow_saturates_at_max_milliseconds() {
    let l = ExponentialRateLimiter::new(ms(1), Duration::from_secs(1000)).unwrap();
    for _ in 0..5 {
        l.when(&"one");
    }
    assert_eq!(l.when(&"one"), ms(32));
    for _ in 0..1000 {
        l.when(&"one");
    }
    assert_eq!(l.when(&"one"), Duration::from_secs(1000));
}

#[test]
fn exponential_overflow_saturates_at_max_minutes() {
    let min = Duration::from_secs(60);
    let hour = Duration::from_secs(3600);
    let l = ExponentialRateLimiter::new(min, 1000 * hour).unwrap();
    l.when(&"one");
    l.when(&"one");
    assert_eq!(l.when(&"one"), 4 * min);
    for _ in 0..1000 {
        l.when(&"one");
    }
    assert_eq!(l.when(&"one"), 1000 * hour);
}

#[test]
fn exponential_never_returns_zero_after_many_failures() {
    let l = ExponentialRateLimiter::new(Duration::from_nanos(1), Duration::MAX).unwrap();
    let mut prev = Duration::ZERO;
    for _ in 0..300 {
        let d = l.when(&0u8);
        assert!(d >= prev && !d.is_zero());
        prev = d;
    }
    assert_eq!(prev, Duration::MAX);
}

#[test]
fn fast_slow_switches_after_max_fast_attempts() {
    let l = FastSlowRateLimiter::new(ms(5), Duration::from_secs(10), 3).unwrap();
    for want in [
        ms(5),
        ms(5),
        ms(5),
        Duration::from_secs(10),
        Duration::from_secs(10),
    ] {
        assert_eq!(l.when(&"one"), want);
    }
    assert_eq!(l.num_requeues(&"one"), 5);
    assert_eq!(l.when(&"two"), ms(5));
    assert_eq!(l.when(&"two"), ms(5));
    assert_eq!(l.num_requeues(&"two"), 2);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), ms(5));
}

#[test]
fn max_of_returns_the_longest_and_forgets_in_all() {
    let l = MaxOfRateLimiter::new(vec![
        Box::new(FastSlowRateLimiter::new(ms(5), Duration::from_secs(3), 3).unwrap())
            as Box<dyn RateLimiter<&str>>,
        Box::new(ExponentialRateLimiter::new(ms(1), Duration::from_secs(1)).unwrap()),
    ])
    .unwrap();
    for want in [
        ms(5),
        ms(5),
        ms(5),
        Duration::from_secs(3),
        Duration::from_secs(3),
    ] {
        assert_eq!(l.when(&"one"), want);
    }
    assert_eq!(l.num_requeues(&"one"), 5);
    assert_eq!(l.when(&"two"), ms(5));
    assert_eq!(l.when(&"two"), ms(5));
    assert_eq!(l.num_requeues(&"two"), 2);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), ms(5));
}

#[test]
fn max_of_charges_every_child() {
    let exp =
        std::sync::Arc::new(ExponentialRateLimiter::new(ms(1), Duration::from_secs(1)).unwrap());
    let l = MaxOfRateLimiter::new(vec![
        Box::new(
            FastSlowRateLimiter::new(Duration::from_secs(100), Duration::from_secs(100), 3)
                .unwrap(),
        ) as Box<dyn RateLimiter<&str>>,
        Box::new(exp.clone()),
    ])
    .unwrap();
    for _ in 0..4 {
        assert_eq!(l.when(&"one"), Duration::from_secs(100));
    }
    assert_eq!(exp.num_requeues(&"one"), 4);
    assert_eq!(exp.when(&"one"), ms(16));
}

#[test]
fn with_max_wait_caps_at_500_seconds() {
    let inner =
        FastSlowRateLimiter::new(Duration::from_secs(60), Duration::from_secs(1000), 1).unwrap();
    let l = WithMaxWaitRateLimiter::new(inner, Duration::from_secs(500)).unwrap();
    assert_eq!(l.when(&"one"), Duration::from_secs(60));
    assert_eq!(l.when(&"one"), Duration::from_secs(500));
    assert_eq!(l.when(&"one"), Duration::from_secs(500));
    assert_eq!(l.num_requeues(&"one"), 3);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), Duration::from_secs(60));
}
