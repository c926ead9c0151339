//! Property tests against simple models: exponential, fast-slow, max-of, max-wait, and the bucket
//! against a port of x/time/rate's `reserveN` arithmetic.

use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ExponentialRateLimiter, FastSlowRateLimiter, MaxOfRateLimiter, RateLimiter,
    WithMaxWaitRateLimiter, capped_exponential,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x5eed),
        ..Config::default()
    }
}

/// The exponential model in plain big-integer arithmetic.
fn model_exp(base: Duration, max: Duration, n: u32) -> Duration {
    let mut d = base.as_nanos();
    for _ in 0..n {
        d = d.saturating_mul(2);
        if d >= max.as_nanos() {
            return max;
        }
    }
    let d = d.min(max.as_nanos());
    Duration::new((d / 1_000_000_000) as u64, (d % 1_000_000_000) as u32)
}

fn duration_ns() -> impl Strategy<Value = Duration> {
    prop_oneof![1u64..1_000_000, 1u64..u64::MAX].prop_map(Duration::from_nanos)
}

/// The limiter's `when` is `capped_exponential` of its failures at every count, across the
/// point where the doubling reaches the cap and where it would shift out of 128 bits.
#[test]
fn exponential_when_is_capped_exponential_at_every_count() {
    let ns = Duration::from_nanos;
    let shapes = [
        (ns(1), Duration::MAX),
        (ns(3), ns(100)),
        (ns(25), ns(100)),
        (ns(100), ns(100)),
        (Duration::from_millis(5), Duration::from_secs(1000)),
        (Duration::MAX, Duration::MAX),
        (Duration::from_secs(1), Duration::MAX),
    ];
    for (base, max) in shapes {
        let l = ExponentialRateLimiter::new(base, max).unwrap();
        for failures in 0..140 {
            assert_eq!(
                l.when(&0u8),
                capped_exponential(base, max, failures),
                "base {base:?}, max {max:?}, after {failures} failures"
            );
        }
    }
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn exponential_matches_model_is_monotone_and_capped(
        base in duration_ns(),
        extra in duration_ns(),
        ops in proptest::collection::vec((0u8..4, any::<bool>()), 1..200),
    ) {
        let max = base.saturating_add(extra);
        let l = ExponentialRateLimiter::new(base, max).unwrap();
        let mut failures = [0u32; 4];
        let mut last = [Duration::ZERO; 4];
        for (key, forget) in ops {
            let k = key as usize;
            if forget {
                l.forget(&key);
                failures[k] = 0;
                last[k] = Duration::ZERO;
            } else {
                let d = l.when(&key);
                prop_assert_eq!(d, model_exp(base, max, failures[k]));
                prop_assert!(d >= last[k] && d >= base && d <= max);
                failures[k] += 1;
                last[k] = d;
            }
            prop_assert_eq!(l.num_requeues(&key), failures[k] as usize);
            let tracked = failures.iter().filter(|&&f| f > 0).count();
            prop_assert_eq!(l.len(), tracked);
            prop_assert_eq!(l.is_empty(), tracked == 0);
        }
    }
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn capped_exponential_matches_model(
        base in duration_ns(),
        max in duration_ns(),
        exponent in prop_oneof![0u32..130, any::<u32>()],
    ) {
        let got = capped_exponential(base, max, exponent);
        // The model doubles `min(base, max)`-style only up to the cap; a base above max is max.
        let want = if base > max { max } else { model_exp(base, max, exponent.min(200)) };
        prop_assert_eq!(got, want);
        prop_assert_eq!(got, capped_exponential(base, max, exponent.saturating_add(1)).min(got));
    }
}

#[test]
fn capped_exponential_edges() {
    let ns = Duration::from_nanos;
    // 2^63 ns exactly: Go returns a negative delay here; we return the product.
    assert_eq!(capped_exponential(ns(1), Duration::MAX, 63), ns(1 << 63));
    assert_eq!(
        capped_exponential(ns(1), Duration::MAX, 64),
        Duration::new(18_446_744_073, 709_551_616)
    );
    // The largest Duration times two saturates at max; huge exponents too.
    assert_eq!(
        capped_exponential(Duration::MAX, Duration::MAX, 1),
        Duration::MAX
    );
    assert_eq!(
        capped_exponential(Duration::MAX, Duration::MAX, u32::MAX),
        Duration::MAX
    );
    assert_eq!(capped_exponential(ns(3), ns(100), u32::MAX), ns(100));
    // Exactly at the cap, and a base above max.
    assert_eq!(capped_exponential(ns(25), ns(100), 2), ns(100));
    assert_eq!(capped_exponential(ns(25), ns(100), 1), ns(50));
    assert_eq!(capped_exponential(ns(200), ns(100), 0), ns(100));
    assert_eq!(
        capped_exponential(Duration::ZERO, ns(100), 5),
        Duration::ZERO
    );
    // A product wider than 64 bits of nanoseconds below a wider cap.
    assert_eq!(
        capped_exponential(Duration::from_secs(1), Duration::MAX, 40),
        Duration::from_secs(1 << 40)
    );
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn fast_slow_matches_model(
        fast in duration_ns(),
        slow in duration_ns(),
        n in 0u32..6,
        ops in proptest::collection::vec((0u8..3, any::<bool>()), 1..100),
    ) {
        let l = FastSlowRateLimiter::new(fast, slow, n).unwrap();
        let mut attempts = [0u32; 3];
        for (key, forget) in ops {
            let k = key as usize;
            if forget {
                l.forget(&key);
                attempts[k] = 0;
            } else {
                attempts[k] += 1;
                let want = if attempts[k] <= n { fast } else { slow };
                prop_assert_eq!(l.when(&key), want);
            }
            prop_assert_eq!(l.num_requeues(&key), attempts[k] as usize);
        }
    }

    #[test]
    fn max_of_and_max_wait_match_their_children(
        base in 1u64..1000,
        fast in 1u64..100_000,
        cap in 1u64..2_000_000,
        ops in proptest::collection::vec((0u8..3, any::<bool>()), 1..100),
    ) {
        let ns = Duration::from_nanos;
        let mk_exp = || ExponentialRateLimiter::new(ns(base), ns(1_000_000)).unwrap();
        let mk_fs = || FastSlowRateLimiter::new(ns(fast), ns(500_000), 3).unwrap();
        let (exp, fs) = (mk_exp(), mk_fs());
        let max_of = MaxOfRateLimiter::new(vec![
            Box::new(mk_exp()) as Box<dyn RateLimiter<u8>>,
            Box::new(mk_fs()),
        ])
        .unwrap();
        let capped = WithMaxWaitRateLimiter::new(mk_exp(), ns(cap)).unwrap();
        for (key, forget) in ops {
            if forget {
                for l in [&exp as &dyn RateLimiter<u8>, &fs, &max_of, &capped] {
                    l.forget(&key);
                }
            } else {
                let (e, f) = (exp.when(&key), fs.when(&key));
                prop_assert_eq!(max_of.when(&key), e.max(f));
                prop_assert_eq!(capped.when(&key), e.min(ns(cap)));
            }
            prop_assert_eq!(
                max_of.num_requeues(&key),
                exp.num_requeues(&key).max(fs.num_requeues(&key))
            );
            prop_assert_eq!(capped.num_requeues(&key), exp.num_requeues(&key));
        }
    }
}

/// x/time/rate's bucket in integer nanoseconds: `Reserve()` at `now` claims the first instant
/// with a token and returns the wait.
struct GoBucket {
    period: u128,
    burst: u128,
    tat: u128,
}

impl GoBucket {
    fn reserve(&mut self, now: u128) -> u128 {
        let tau = (self.burst - 1) * self.period;
        let at = now.max(self.tat.saturating_sub(tau));
        self.tat = self.tat.max(at) + self.period;
        at - now
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn bucket_matches_go_reserve(
        period_ns in 1u64..2_000_000_000,
        burst in 1u32..50,
        ops in proptest::collection::vec(prop_oneof![Just(0u64), 1u64..3_000_000_000], 1..150),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let b = BucketRateLimiter::with_period(Duration::from_nanos(period_ns), burst).unwrap();
            let start = tokio::time::Instant::now();
            let mut model = GoBucket { period: period_ns.into(), burst: burst.into(), tat: 0 };
            let mut prev_claim = 0u128;
            for advance in ops {
                if advance > 0 {
                    tokio::time::advance(Duration::from_nanos(advance)).await;
                    continue;
                }
                let now = (tokio::time::Instant::now() - start).as_nanos();
                let got = b.reserve().as_nanos();
                let want = model.reserve(now);
                prop_assert_eq!(got, want, "now {}", now);
                // Claims are handed out in order, one period apart at least once the burst is used.
                prop_assert!(now + got >= prev_claim);
                prev_claim = now + got;
            }
            Ok(())
        })?;
    }
}
