//! The buckets against a model of x/time/rate's reservation arithmetic, at every accepted shape,
//! and the shapes whose arithmetic would leave 64 bits rejected at construction.
//!
//! The model is Go's `reserveN` (`golang.org/x/time/rate`) with the tokens kept exactly: scaled
//! by the period, a token count is a number of nanoseconds, so `advance` adds the elapsed time
//! and caps at `burst × period`, and a reservation takes one period. It is computed in `i128`, so
//! the model itself cannot overflow, and it is a different formulation from the crate's (a token
//! count, not an arrival time).

use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ConfigError, ItemBucketRateLimiter, MAX_DELAY, MAX_HORIZON, MAX_PERIOD,
    RateLimiter,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

const DAY: Duration = Duration::from_secs(24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);
/// A period (about 22 h) whose largest burst, 114,688, fills the horizon exactly.
const EXACT: Duration = Duration::from_nanos(80_146_449_819_116);

/// x/time/rate's `Limiter` as `ReserveN(now, 1)` with `maxFutureReserve = MAX_DELAY`; a
/// refused reservation (Go: `Delay() == InfDuration`) reports `MAX_DELAY`.
#[derive(Debug)]
struct GoLimiter {
    period: i128,
    burst: i128,
    /// Tokens × period.
    tokens: i128,
    last: i128,
}

impl GoLimiter {
    fn new(period: Duration, burst: u32) -> Self {
        let period = period.as_nanos() as i128;
        let burst = i128::from(burst);
        Self {
            period,
            burst,
            tokens: burst * period,
            last: 0,
        }
    }

    fn reserve(&mut self, now: i128) -> Duration {
        // advance(): elapsed time refills, up to the burst; a `now` before `last` adds nothing.
        let elapsed = (now - self.last).max(0);
        let tokens = (self.tokens + elapsed).min(self.burst * self.period) - self.period;
        let wait = (-tokens).max(0);
        if wait > MAX_DELAY.as_nanos() as i128 {
            return MAX_DELAY;
        }
        self.last = now;
        self.tokens = tokens;
        Duration::from_nanos(wait as u64)
    }
}

/// The largest burst accepted for `period`.
fn max_burst(period: Duration) -> u32 {
    let room = MAX_HORIZON.as_nanos() - MAX_DELAY.as_nanos();
    (room / period.as_nanos()).min(u128::from(u32::MAX)) as u32
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// Nanoseconds since `start` on tokio's clock.
fn since(start: tokio::time::Instant) -> i128 {
    (tokio::time::Instant::now() - start).as_nanos() as i128
}

#[tokio::test(start_paused = true)]
async fn shapes_beyond_the_horizon_are_rejected() {
    // Each would overflow 64-bit nanoseconds: (1 day, 213,505) and (1 h, 5,124,097) in the
    // tolerance itself, (1 day, 213,504) once the burst is used.
    for (period, burst) in [(DAY, 213_505), (HOUR, 5_124_097), (DAY, 213_504)] {
        let want = ConfigError::HorizonTooLong {
            period,
            burst,
            max: MAX_HORIZON,
        };
        assert_eq!(
            BucketRateLimiter::with_period(period, burst).unwrap_err(),
            want
        );
        assert_eq!(
            ItemBucketRateLimiter::<u8>::with_period(period, burst).unwrap_err(),
            want
        );
    }
    // The edge, both sides.
    for period in [
        DAY,
        HOUR,
        Duration::from_nanos(1),
        Duration::from_nanos(2_147_483_649),
    ] {
        let b = max_burst(period);
        assert!(
            BucketRateLimiter::with_period(period, b).is_ok(),
            "{period:?} {b}"
        );
        if b < u32::MAX {
            assert!(matches!(
                BucketRateLimiter::with_period(period, b + 1),
                Err(ConfigError::HorizonTooLong { .. })
            ));
        }
    }
    assert_eq!(max_burst(DAY), 106_386);
    assert_eq!(
        EXACT.as_nanos() * u128::from(max_burst(EXACT)) + MAX_DELAY.as_nanos(),
        MAX_HORIZON.as_nanos()
    );
}

/// Drains the largest bucket a period allows at one instant, then checks the debt and the
/// refill against Go.
async fn drain_at_the_edge(period: Duration) {
    let burst = max_burst(period);
    let b = BucketRateLimiter::with_period(period, burst).unwrap();
    let start = tokio::time::Instant::now();
    let mut go = GoLimiter::new(period, burst);
    for _ in 0..burst {
        assert_eq!(b.reserve(), Duration::ZERO);
        go.reserve(0);
    }
    // Go: one period, two, three, ... until the reservation cap refuses.
    let mut k = 1;
    loop {
        let (got, want) = (b.reserve(), go.reserve(since(start)));
        assert_eq!(got, want, "call {k} after the burst");
        if got == MAX_DELAY {
            break;
        }
        assert_eq!(got, period * k);
        k += 1;
    }
    // Years later, far in the clock, the bucket is full again and no fuller.
    for years in [1u64, 50, 200] {
        tokio::time::advance(Duration::from_secs(years * 365 * 24 * 3600)).await;
        for _ in 0..3 {
            assert_eq!(b.reserve(), go.reserve(since(start)));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_largest_daily_bucket_matches_go() {
    drain_at_the_edge(DAY).await;
}

#[tokio::test(start_paused = true)]
async fn the_bucket_that_fills_the_horizon_exactly_matches_go() {
    drain_at_the_edge(EXACT).await;
}

#[tokio::test(start_paused = true)]
async fn the_largest_hourly_bucket_matches_go() {
    drain_at_the_edge(HOUR).await;
}

/// Shapes: small ones whose debt is reached quickly, and long periods with bursts up to the
/// largest accepted one.
fn shape() -> impl Strategy<Value = (Duration, u32)> {
    prop_oneof![
        (1u64..2_000_000_000, 1u32..50).prop_map(|(p, b)| (Duration::from_nanos(p), b)),
        (1u64..=MAX_PERIOD.as_nanos() as u64, 1u32..200)
            .prop_map(|(p, b)| (Duration::from_nanos(p), b)),
        (1u64..=MAX_PERIOD.as_nanos() as u64).prop_map(|p| {
            let p = Duration::from_nanos(p);
            (p, max_burst(p))
        }),
    ]
}

/// A schedule: `Ok(n)` is n calls at the current instant, `Err(d)` advances tokio's clock by d
/// nanoseconds (up to about 3 years each; at most 80 steps in all, which stay within the
/// clock's 292 years).
fn schedule(steps: usize) -> impl Strategy<Value = Vec<Result<u16, u64>>> {
    let step = prop_oneof![
        3 => (1u16..40).prop_map(Ok),
        2 => (1u64..3_000_000_000).prop_map(Err),
        1 => (1u64..100_000_000_000_000_000).prop_map(Err),
    ];
    proptest::collection::vec(step, 1..steps)
}

proptest! {
    #![proptest_config(Config {
        cases: 1500,
        rng_seed: RngSeed::Fixed(0x60_1a7e),
        ..Config::default()
    })]

    #[test]
    fn bucket_delays_are_go_delays((period, burst) in shape(), steps in schedule(80)) {
        paused_runtime().block_on(async {
            let b = BucketRateLimiter::with_period(period, burst).unwrap();
            let start = tokio::time::Instant::now();
            let mut go = GoLimiter::new(period, burst);
            for step in steps {
                match step {
                    Ok(calls) => {
                        for _ in 0..calls {
                            prop_assert_eq!(b.reserve(), go.reserve(since(start)), "{:?}", go);
                        }
                    }
                    Err(ns) => tokio::time::advance(Duration::from_nanos(ns)).await,
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn item_bucket_delays_are_go_delays_per_key(
        (period, burst) in shape(),
        steps in proptest::collection::vec((0u8..3, schedule(26)), 1..4),
    ) {
        paused_runtime().block_on(async {
            let l = ItemBucketRateLimiter::with_period(period, burst).unwrap();
            let start = tokio::time::Instant::now();
            let mut go: Vec<GoLimiter> = (0..3).map(|_| GoLimiter::new(period, burst)).collect();
            for (key, steps) in steps {
                for step in steps {
                    match step {
                        Ok(calls) => {
                            for _ in 0..calls {
                                let want = go[key as usize].reserve(since(start));
                                prop_assert_eq!(l.when(&key), want);
                            }
                        }
                        Err(ns) => tokio::time::advance(Duration::from_nanos(ns)).await,
                    }
                }
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn the_clock_stops_at_the_horizon_and_the_largest_bucket_stays_exact() {
    let burst = max_burst(EXACT);
    let b = BucketRateLimiter::with_period(EXACT, burst).unwrap();
    tokio::time::advance(Duration::from_secs(300 * 365 * 24 * 3600)).await;
    // The bucket's clock stopped 2^63 − 1 ns after its construction: Go at that instant, with
    // the bucket driven to the deepest debt it accepts there.
    let end = (1i128 << 63) - 1;
    let mut go = GoLimiter::new(EXACT, burst);
    let mut calls = 0;
    loop {
        let (got, want) = (b.reserve(), go.reserve(end));
        assert_eq!(got, want, "call {calls}");
        calls += 1;
        if got == MAX_DELAY {
            break;
        }
    }
    assert!(calls > burst);
    // Later calls see the same instant.
    tokio::time::advance(DAY).await;
    assert_eq!(b.reserve(), go.reserve(end));
}
