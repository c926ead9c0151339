//! The token bucket's arithmetic: GCRA on whole nanoseconds, x/time/rate's `Reserve` exactly.
//!
//! # Why this is x/time/rate's bucket
//!
//! With period `T`, burst `b` and tolerance `τ = (b − 1)·T`, a bucket is one instant, its
//! *theoretical arrival time* `TAT`. At instant `t` it holds `b − (max(TAT, t) − t) / T` tokens:
//! full (`b`) once `TAT ≤ t`, refilled continuously at `1/T`, and in debt when `TAT − t > b·T`.
//! That is x/time/rate's bucket (capacity `b`, starting full: `TAT = 0`), whose `Reserve()` at
//! `now` claims the first instant with a token, `at = max(now, TAT − τ)`, returns the wait
//! `at − now` and sets `TAT ← max(TAT, now) + T` (the debt is recorded, so a burst of callers
//! gets increasing delays). Go's reservations are unbounded; ours are capped: a wait longer than
//! [`MAX_DELAY`] claims nothing and returns `MAX_DELAY` (Go's `ReserveN` with that
//! `maxFutureReserve`, whose refused reservation reports an infinite delay).
//!
//! # Why nothing overflows
//!
//! Every claim has `at ≤ now + MAX_DELAY`, so afterwards `TAT ≤ now + MAX_DELAY +
//! b·T`. Construction rejects `b·T + MAX_DELAY > MAX_HORIZON` (2^63 ns), and the clock
//! stops at 2^63 − 1 ns, so every `TAT` fits a `u64` and every sum below is exact.

use std::time::Duration;

use crate::ConfigError;
use crate::clock::CLOCK_MAX_NS;

/// The workspace's one far-future limit: a year. The longest delay a limiter returns (a bucket's
/// reservation further out claims nothing and returns this), the longest delay a queue's
/// delayed add honours (longer ones are clamped to it), and where the scheduling queue puts a
/// deadline that does not fit in an instant; adding it to an instant never fails, and no work
/// waits a year for a retry.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::MAX_DELAY;
///
/// assert_eq!(MAX_DELAY, Duration::from_secs(365 * 24 * 3600));
/// ```
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest refill period accepted (one token per day at least).
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The longest stretch a bucket's arithmetic covers: 2^63 ns, about 292 years (Go's longest
/// `time.Duration`). Not a limit on a delay (that is [`MAX_DELAY`], a year): the range in which
/// a bucket's debt and its furthest reservation are represented exactly.
///
/// A bucket is accepted only if `burst × period + MAX_DELAY ≤ MAX_HORIZON` (a full burst
/// of debt plus the furthest reservation), so for example one token a day allows a burst of at
/// most 106,386. Within that, every sequence of calls gets x/time/rate's delays (Go's own, for a
/// period of whole nanoseconds; a fractional rate's period is rounded to the nearest one). A
/// bucket's clock counts from its construction and stops `MAX_HORIZON` later.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{BucketRateLimiter, ConfigError, MAX_HORIZON};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let day = Duration::from_secs(24 * 3600);
/// assert!(BucketRateLimiter::with_period(day, 106_386).is_ok());
/// assert!(matches!(
///     BucketRateLimiter::with_period(day, 106_387),
///     Err(ConfigError::HorizonTooLong { max: MAX_HORIZON, .. })
/// ));
/// # }
/// ```
pub const MAX_HORIZON: Duration = Duration::from_nanos(1 << 63);

/// [`MAX_DELAY`] in nanoseconds.
const MAX_DELAY_NS: u64 = MAX_DELAY.as_secs() * 1_000_000_000;

/// One second in nanoseconds.
const SECOND_NS: u64 = 1_000_000_000;

/// A validated bucket shape, in nanoseconds. A zero period is the unlimited bucket (Go's
/// `rate.Inf`): every claim is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gcra {
    period: u64,
    tau: u64,
}

/// The outcome of a reservation: the wait and the bucket's next `TAT`, or `None` when the wait
/// would exceed [`MAX_DELAY`] (nothing is claimed).
pub(crate) type Claim = Option<(u64, u64)>;

impl Gcra {
    /// One token every `period`, at most `burst` held.
    pub(crate) fn with_period(period: Duration, burst: u32) -> Result<Self, ConfigError> {
        if burst == 0 {
            return Err(ConfigError::Zero { name: "burst" });
        }
        if period.is_zero() {
            return Err(ConfigError::ZeroDuration { name: "period" });
        }
        if period > MAX_PERIOD {
            return Err(ConfigError::PeriodTooLong {
                period,
                max: MAX_PERIOD,
            });
        }
        let horizon = period.as_nanos() * u128::from(burst) + u128::from(MAX_DELAY_NS);
        if horizon > MAX_HORIZON.as_nanos() {
            return Err(ConfigError::HorizonTooLong {
                period,
                burst,
                max: MAX_HORIZON,
            });
        }
        // Both fit: period ≤ MAX_PERIOD, and tau < burst × period ≤ MAX_HORIZON.
        let period = period.as_nanos() as u64;
        Ok(Self {
            period,
            tau: period * u64::from(burst - 1),
        })
    }

    /// `rate` tokens per second (whole), the period rounded to the nearest nanosecond (at least
    /// 1 ns).
    pub(crate) fn per_second(rate: u32, burst: u32) -> Result<Self, ConfigError> {
        if rate == 0 {
            return Err(ConfigError::Zero { name: "rate" });
        }
        let rate = u64::from(rate);
        let period = ((2 * SECOND_NS + rate) / (2 * rate)).max(1);
        Self::with_period(Duration::from_nanos(period), burst)
    }

    /// `rate` tokens per second (fractional, or infinite for no limit), the period rounded to the
    /// nearest nanosecond (at least 1 ns).
    pub(crate) fn per_second_f64(rate: f64, burst: u32) -> Result<Self, ConfigError> {
        if rate.is_nan() || rate < 0.0 {
            return Err(ConfigError::InvalidRate);
        }
        if rate == 0.0 {
            return Err(ConfigError::Zero { name: "rate" });
        }
        if rate == f64::INFINITY {
            return Ok(Self::UNLIMITED);
        }
        let period = (SECOND_NS as f64 / rate).round().max(1.0);
        let max = MAX_PERIOD.as_nanos() as f64;
        if period > max {
            return Err(ConfigError::PeriodTooLong {
                period: Duration::try_from_secs_f64(period / SECOND_NS as f64)
                    .unwrap_or(Duration::MAX),
                max: MAX_PERIOD,
            });
        }
        // A whole number of nanoseconds of at most a day: the conversion is exact.
        Self::with_period(Duration::from_nanos(period as u64), burst)
    }

    /// A shape known valid at compile time (`period_ns > 0`, `burst > 0`, within the horizon).
    pub(crate) const fn from_parts(period_ns: u64, burst: u32) -> Self {
        Self {
            period: period_ns,
            tau: period_ns * (burst as u64 - 1),
        }
    }

    /// The bucket that never makes anyone wait.
    pub(crate) const UNLIMITED: Self = Self { period: 0, tau: 0 };

    /// Whether every claim is free.
    pub(crate) fn is_unlimited(&self) -> bool {
        self.period == 0
    }

    /// The refill period in nanoseconds (0 when unlimited).
    pub(crate) fn period_ns(&self) -> u64 {
        self.period
    }

    /// Go's `Reserve()` at `now` on a bucket whose state is `tat` (see the module docs).
    pub(crate) fn claim(&self, tat: u64, now: u64) -> Claim {
        debug_assert!(now <= CLOCK_MAX_NS);
        // Before `now` (or before the clock's zero) both mean "a token is there now".
        let at = tat.saturating_sub(self.tau).max(now);
        let delay = at - now;
        if delay > MAX_DELAY_NS {
            return None;
        }
        // `max(TAT, at) + T` in Go's terms: `at` exceeds `now` only when it is `TAT − τ ≤ TAT`.
        Some((delay, tat.max(now) + self.period))
    }
}

/// The wait a claim reports: [`MAX_DELAY`] when it claimed nothing.
pub(crate) fn claim_delay(claim: Claim) -> Duration {
    claim.map_or(MAX_DELAY, |(delay, _)| Duration::from_nanos(delay))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_the_period_to_the_nearest_nanosecond() {
        // 1e9 / 7 = 142,857,142.86 ns; 1e9 / 3 = 333,333,333.33 ns.
        assert_eq!(Gcra::per_second(7, 1).unwrap().period, 142_857_143);
        assert_eq!(Gcra::per_second(3, 1).unwrap().period, 333_333_333);
        assert_eq!(Gcra::per_second_f64(7.0, 1).unwrap().period, 142_857_143);
        assert_eq!(Gcra::per_second_f64(2.5, 1).unwrap().period, 400_000_000);
        assert_eq!(Gcra::per_second(u32::MAX, 1).unwrap().period, 1);
        assert_eq!(Gcra::per_second(1_500_000_000, 1).unwrap().period, 1);
        assert_eq!(Gcra::per_second(2_100_000_000, 1).unwrap().period, 1);
        assert_eq!(Gcra::per_second_f64(3e9, 1).unwrap().period, 1);
        assert_eq!(Gcra::per_second(10, 100).unwrap().tau, 99 * 100_000_000);
    }

    #[test]
    fn claims_at_the_horizon_edge_are_exact() {
        let g = Gcra::with_period(MAX_PERIOD, 106_386).unwrap();
        let t = g.period * 106_385;
        assert_eq!(g.tau, t);
        // A bucket as far in debt as it can get, at the end of the clock: no overflow.
        let tat = CLOCK_MAX_NS + MAX_DELAY_NS + t;
        assert_eq!(
            g.claim(tat, CLOCK_MAX_NS),
            Some((MAX_DELAY_NS, tat + g.period))
        );
        assert_eq!(g.claim(tat + 1, CLOCK_MAX_NS), None);
    }
}
