//! Fractional rates rounded to the nearest nanosecond, Go's `rate.Inf`, zero rates, and the
//! common constructions inferring their types.

use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ConfigError, ExponentialRateLimiter, ItemBucketRateLimiter, MAX_PERIOD,
    MaxOfRateLimiter, RateLimiter,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn a_fractional_rate_is_go_s_float_limit() {
    // Go: rate.NewLimiter(2.5, 2): 0, 0, 400 ms, 800 ms.
    let b = BucketRateLimiter::with_rate(2.5, 2).unwrap();
    assert_eq!(b.period(), ms(400));
    let got: Vec<_> = (0..4).map(|_| b.reserve()).collect();
    assert_eq!(got, [Duration::ZERO, Duration::ZERO, ms(400), ms(800)]);
    // Periods round to the nearest nanosecond: 1 s / 7 = 142,857,142.86 ns.
    let p = Duration::from_nanos(142_857_143);
    assert_eq!(BucketRateLimiter::with_rate(7.0, 1).unwrap().period(), p);
    assert_eq!(BucketRateLimiter::per_second(7, 1).unwrap().period(), p);
    assert_eq!(
        BucketRateLimiter::with_rate(1.0 / 3.0, 1).unwrap().period(),
        Duration::from_secs(3)
    );
    // Beyond a nanosecond per token, 1 ns.
    assert_eq!(
        BucketRateLimiter::with_rate(1e12, 1).unwrap().period(),
        Duration::from_nanos(1)
    );
    assert_eq!(
        BucketRateLimiter::per_second(u32::MAX, 1).unwrap().period(),
        Duration::from_nanos(1)
    );
}

#[tokio::test(start_paused = true)]
async fn bad_rates_are_typed_errors() {
    for rate in [f64::NAN, -1.0, f64::NEG_INFINITY, -0.0 - 1e-300] {
        assert_eq!(
            BucketRateLimiter::with_rate(rate, 1).unwrap_err(),
            ConfigError::InvalidRate
        );
    }
    for rate in [0.0, -0.0] {
        assert_eq!(
            BucketRateLimiter::with_rate(rate, 1).unwrap_err(),
            ConfigError::Zero { name: "rate" }
        );
    }
    assert_eq!(
        BucketRateLimiter::with_rate(1.0, 0).unwrap_err(),
        ConfigError::Zero { name: "burst" }
    );
    // One token a day is the slowest; slower is rejected, however slow.
    assert!(BucketRateLimiter::with_rate(1.0 / 86_400.0, 1).is_ok());
    assert_eq!(
        BucketRateLimiter::with_rate(1.0 / 86_401.0, 1).unwrap_err(),
        ConfigError::PeriodTooLong {
            period: Duration::from_secs(86_401),
            max: MAX_PERIOD
        }
    );
    for rate in [1.0 / 86_401.0, 1e-300, f64::MIN_POSITIVE] {
        assert!(matches!(
            BucketRateLimiter::with_rate(rate, 1),
            Err(ConfigError::PeriodTooLong {
                max: MAX_PERIOD,
                ..
            })
        ));
    }
    assert!(matches!(
        ItemBucketRateLimiter::<u8>::with_rate(f64::NAN, 1),
        Err(ConfigError::InvalidRate)
    ));
}

#[tokio::test(start_paused = true)]
async fn an_infinite_rate_never_waits_and_keeps_no_state() {
    // Go: rate.NewLimiter(rate.Inf, 0) allows everything, burst ignored.
    for b in [
        BucketRateLimiter::with_rate(f64::INFINITY, 0).unwrap(),
        BucketRateLimiter::unlimited(),
    ] {
        assert!((0..10_000).all(|_| b.reserve().is_zero()));
        assert_eq!(b.period(), Duration::ZERO);
    }
    let l = ItemBucketRateLimiter::with_rate(f64::INFINITY, 1).unwrap();
    assert!((0..100u32).all(|k| l.when(&(k % 3)).is_zero()));
    assert!(l.is_empty());
}

#[tokio::test(start_paused = true)]
async fn common_constructions_infer_their_types() {
    // No cast on the first child.
    let l =
        MaxOfRateLimiter::of(ExponentialRateLimiter::new(ms(5), Duration::from_secs(1)).unwrap())
            .and(BucketRateLimiter::per_second(10, 1).unwrap());
    assert_eq!(l.when(&"a"), ms(5));
    assert_eq!(l.when(&"a"), ms(100));
    assert_eq!(l.num_requeues(&"a"), 2);
    assert_eq!(format!("{l:?}"), "MaxOfRateLimiter { limiters: 2 }");
    // The bucket's methods on a key of any type, no annotation.
    let b = BucketRateLimiter::per_second(10, 1).unwrap();
    assert_eq!(b.when("k"), Duration::ZERO);
    assert_eq!(b.when(&String::from("k")), ms(100));
    assert_eq!(b.num_requeues(&7u8), 0);
    // Accessors.
    assert_eq!(BucketRateLimiter::per_second(10, 100).unwrap().burst(), 100);
    assert_eq!(BucketRateLimiter::with_rate(0.5, 3).unwrap().burst(), 3);
    assert_eq!(
        BucketRateLimiter::with_rate(f64::INFINITY, 7)
            .unwrap()
            .burst(),
        7
    );
    assert_eq!(BucketRateLimiter::unlimited().burst(), 0);
    // The per-item bucket has the bucket's constructors, all with a default bound.
    let i = ItemBucketRateLimiter::with_period(ms(100), 1).unwrap();
    assert!(i.is_empty());
    assert_eq!(i.when(&1), Duration::ZERO);
    assert!(!i.is_empty());
    assert_eq!(i.when(&1), ms(100));
    let i = ItemBucketRateLimiter::with_rate(2.5, 1).unwrap();
    assert_eq!((i.when(&1), i.when(&1)), (Duration::ZERO, ms(400)));
    let i = ItemBucketRateLimiter::per_second(7, 1).unwrap();
    assert_eq!(
        (i.when(&1), i.when(&1)),
        (Duration::ZERO, Duration::from_nanos(142_857_143))
    );
    let e = ExponentialRateLimiter::new(ms(1), ms(2)).unwrap();
    assert!(e.is_empty());
    e.when(&1u8);
    assert_eq!((e.len(), e.is_empty()), (1, false));
}
