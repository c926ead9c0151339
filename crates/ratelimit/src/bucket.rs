//! [`BucketRateLimiter`]: one token bucket shared by every key, with Go's `Reserve().Delay()`.
//!
//! # Why the reservation is exact
//!
//! governor implements GCRA: with period `T`, burst `b` and tolerance `τ = (b − 1)·T`, a check at
//! instant `t` conforms iff `t ≥ TAT − τ`, and on success sets `TAT ← max(TAT, t) + T`. A failed
//! check changes nothing and reports `earliest_possible() = TAT − τ`. Since governor 0.8 this is
//! exactly x/time/rate's bucket (capacity `b`, starting full, refilled at `1/T`), whose
//! `Reserve()` returns `delay = max(0, TAT − τ − now)` and sets `TAT ← max(TAT, now) + T`.
//!
//! governor has no reservations, so `when` builds one: it checks at `now`; if that fails it checks
//! again *at* `t = earliest_possible()` (the clock is overridden for that one call, see
//! `clock.rs`). At that instant `t = TAT − τ ≥ now`, so the check conforms and sets
//! `TAT ← TAT + T`: the same update as Go's, and the delay is `t − now`. If another thread moved
//! `TAT` in between, the second check fails and the loop retries from the new earliest instant;
//! each retry means another caller's CAS succeeded, so the loop is lock-free and the outcome is
//! the serial order of the successful CASes. "Check, and on failure return the wait" would be
//! wrong: it records no debt, so a burst of rejected callers would all get the same delay.
//!
//! A bucket in debt would fail the first check on every call. To save that check, the bucket
//! keeps a hint `h`, a lower bound of the earliest conforming instant `TAT − τ`, and checks first
//! at `max(now, h)`. A check at an instant `t > now` that is at most `TAT − τ` conforms only if
//! `t = TAT − τ` exactly, so a claim with a positive delay happened at exactly `TAT − τ`, which
//! makes the new `TAT = t + τ + T`: the hint becomes exactly `t + T`. A claim at `now` only tells
//! `TAT ≥ now + T`, so the hint becomes `now + T − τ`. `TAT` never decreases, so a hint stays a
//! lower bound forever: a fresh hint claims in one check, a stale one (another thread claimed
//! since) merely fails that check and falls back to the loop above.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::Quota;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};

use crate::clock::TokioClock;
use crate::{ConfigError, RateLimiter};

/// The governor limiter used by the buckets.
pub(crate) type Direct =
    governor::RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Nanos>>;

/// The longest refill period accepted (one token per day at least).
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The longest delay a reservation returns; beyond it no token is claimed (a documented clamp
/// that keeps governor's nanosecond state far from its 584-year limit).
pub const MAX_RESERVATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A token bucket shared by all keys: client-go's `BucketRateLimiter` (`rate.NewLimiter(qps,
/// burst)`), built on governor and driven by tokio's clock.
///
/// Every [`when`](RateLimiter::when) takes a token now or reserves one in the future and returns
/// the wait, so a burst of calls gets increasing delays and never an error: at 10/s with burst
/// 100, the first 100 calls wait 0, then 100 ms, 200 ms, ... The bucket starts full and refills
/// continuously. `forget` does nothing and `num_requeues` is always 0 (no per-key state), as in Go.
///
/// Time is read from `tokio::time::Instant`, so `tokio::time::pause()` drives it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ratelimit::{BucketRateLimiter, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let bucket = BucketRateLimiter::per_second(10, 2).unwrap();
/// assert_eq!(bucket.when("a"), Duration::ZERO);
/// assert_eq!(bucket.when("b"), Duration::ZERO);
/// assert_eq!(bucket.when("c"), Duration::from_millis(100));
/// assert_eq!(bucket.when("d"), Duration::from_millis(200));
/// # }
/// ```
#[derive(Debug)]
pub struct BucketRateLimiter {
    limiter: Direct,
    period: Duration,
    burst: u32,
    /// The limiter's clock (kept to read it without going through governor).
    clock: TokioClock,
    /// Clock reading before which no check can conform (see the module docs).
    hint: AtomicU64,
}

impl BucketRateLimiter {
    /// A bucket refilled with `rate` tokens per second, holding at most `burst`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] if `rate` or `burst` is zero. Rates above 10^9 per second are
    /// clamped to 10^9 (governor counts whole nanoseconds).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratelimit::BucketRateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// assert!(BucketRateLimiter::per_second(10, 100).is_ok());
    /// assert!(BucketRateLimiter::per_second(0, 100).is_err());
    /// # }
    /// ```
    pub fn per_second(rate: u32, burst: u32) -> Result<Self, ConfigError> {
        if rate == 0 {
            return Err(ConfigError::Zero { name: "rate" });
        }
        Self::with_period(
            (Duration::from_secs(1) / rate).max(Duration::from_nanos(1)),
            burst,
        )
    }

    /// A bucket gaining one token every `period`, holding at most `burst`.
    ///
    /// Periods are whole nanoseconds (governor's resolution).
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`] for a zero period, [`ConfigError::Zero`] for a zero burst,
    /// [`ConfigError::PeriodTooLong`] beyond [`MAX_PERIOD`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratelimit::BucketRateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = BucketRateLimiter::with_period(Duration::from_millis(100), 1).unwrap();
    /// assert_eq!(b.period(), Duration::from_millis(100));
    /// # }
    /// ```
    pub fn with_period(period: Duration, burst: u32) -> Result<Self, ConfigError> {
        let burst_nz = NonZeroU32::new(burst).ok_or(ConfigError::Zero { name: "burst" })?;
        if period > MAX_PERIOD {
            return Err(ConfigError::PeriodTooLong {
                period,
                max: MAX_PERIOD,
            });
        }
        let quota = Quota::with_period(period)
            .ok_or(ConfigError::ZeroDuration { name: "period" })?
            .allow_burst(burst_nz);
        Ok(Self::from_quota(quota, period, burst))
    }

    /// A bucket of `RATE` per second and burst `BURST`, checked at compile time (both non-zero).
    pub(crate) fn per_second_const<const RATE: u32, const BURST: u32>() -> Self {
        let rate = const { NonZeroU32::new(RATE).expect("RATE > 0") };
        let burst = const { NonZeroU32::new(BURST).expect("BURST > 0") };
        let quota = Quota::per_second(rate).allow_burst(burst);
        Self::from_quota(quota, Duration::from_secs(1) / RATE, BURST)
    }

    fn from_quota(quota: Quota, period: Duration, burst: u32) -> Self {
        let clock = TokioClock::new();
        Self {
            limiter: governor::RateLimiter::direct_with_clock(quota, clock),
            period,
            burst,
            clock,
            hint: AtomicU64::new(0),
        }
    }

    /// The refill period (time per token).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = ratelimit::BucketRateLimiter::per_second(10, 100).unwrap();
    /// assert_eq!(b.period(), std::time::Duration::from_millis(100));
    /// # }
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The bucket capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = ratelimit::BucketRateLimiter::per_second(10, 100).unwrap();
    /// assert_eq!(b.burst(), 100);
    /// # }
    /// ```
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Takes a token at tokio's current instant (now or reserved in the future); returns the wait.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = ratelimit::BucketRateLimiter::per_second(1, 1).unwrap();
    /// assert!(b.reserve().is_zero());
    /// assert_eq!(b.reserve(), std::time::Duration::from_secs(1));
    /// # }
    /// ```
    pub fn reserve(&self) -> Duration {
        let now = self.clock.elapsed_ns();
        let hint = self.hint.load(Ordering::Relaxed);
        let delay = reserve_from(&self.limiter, now, now.max(hint));
        if delay < MAX_RESERVATION_NS {
            let claimed = now + delay;
            let period = duration_ns(self.period);
            let next = if delay == 0 {
                // Claimed at `now`: TAT' ≥ now + T, so the next claim is at or after now + T − τ.
                let tau = period.saturating_mul(u64::from(self.burst - 1));
                (claimed + period).saturating_sub(tau)
            } else {
                // Claimed in the future: that instant was exactly TAT − τ, so TAT' = t + τ + T
                // and the next claim is at exactly t + T.
                claimed + period
            };
            self.hint.store(next, Ordering::Relaxed);
        }
        Duration::from_nanos(delay)
    }
}

/// [`MAX_RESERVATION`] in nanoseconds.
const MAX_RESERVATION_NS: u64 = MAX_RESERVATION.as_secs() * 1_000_000_000;

/// A duration in whole nanoseconds (saturating; our periods are at most a day).
pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Go's `Reserve().DelayFrom(now)` on a governor direct limiter (see the module docs); clock
/// readings and the delay in nanoseconds.
pub(crate) fn reserve(limiter: &Direct, now: u64) -> u64 {
    reserve_from(limiter, now, now)
}

/// [`reserve`], trying first at `start ≥ now`, a lower bound of the earliest conforming instant.
fn reserve_from(limiter: &Direct, now: u64, start: u64) -> u64 {
    if start - now > MAX_RESERVATION_NS {
        return MAX_RESERVATION_NS;
    }
    let mut t = start;
    loop {
        match TokioClock::at(t, || limiter.check()) {
            Ok(()) => return t - now,
            Err(not_until) => {
                let next = not_until.earliest_possible().as_u64();
                if next.saturating_sub(now) > MAX_RESERVATION_NS {
                    tracing::debug!(wait_ns = next - now, "bucket reservation clamped");
                    return MAX_RESERVATION_NS;
                }
                // NOTE: `next > t` always (a failed check at t means TAT − τ > t), so this
                // terminates; `max` guards against a non-advancing clock anyway.
                t = next.max(t + 1);
            }
        }
    }
}

impl<K: ?Sized> RateLimiter<K> for BucketRateLimiter {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
}
