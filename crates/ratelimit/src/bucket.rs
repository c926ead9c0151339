//! [`BucketRateLimiter`]: one token bucket shared by every key, with Go's `Reserve().Delay()`.
//!
//! The bucket is one `AtomicU64`, its theoretical arrival time (see `gcra.rs`). A reservation
//! reads it, computes the claim and installs the new value with one compare-and-swap; a failed
//! swap means another caller claimed in between, so it retries from the value that caller
//! stored. The loop is lock-free and the outcome is the serial order of the successful swaps:
//! every caller gets a distinct slot, as under Go's mutex.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::TokioClock;
use crate::gcra::{Gcra, claim_delay};
use crate::{ConfigError, RateLimiter};

/// A token bucket shared by all keys: client-go's `BucketRateLimiter` (`rate.NewLimiter(qps,
/// burst)`), driven by tokio's clock.
///
/// Every [`when`](RateLimiter::when) takes a token now or reserves one in the future and returns
/// the wait, so a burst of calls gets increasing delays and never an error: at 10/s with burst
/// 100, the first 100 calls wait 0, then 100 ms, 200 ms, ... The bucket starts full and refills
/// continuously. `forget` does nothing and `num_requeues` is always 0 (no per-key state), as in Go.
///
/// The delays are x/time/rate's for every sequence of calls, with two documented limits: a wait
/// longer than [`MAX_DELAY`](crate::MAX_DELAY) claims nothing and returns that cap,
/// and the shape must fit [`MAX_HORIZON`](crate::MAX_HORIZON). Go's `rate.Inf` is
/// [`unlimited`](Self::unlimited) (or `with_rate(f64::INFINITY, _)`). A zero rate (Go: the
/// burst, then never again) is rejected: a retry limiter that never lets a key through again
/// strands it; cap retries in the caller instead.
///
/// Time is read from `tokio::time::Instant`, so `tokio::time::pause()` drives it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{BucketRateLimiter, RateLimiter};
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
    gcra: Gcra,
    burst: u32,
    clock: TokioClock,
    /// The theoretical arrival time, in clock nanoseconds.
    tat: AtomicU64,
}

impl BucketRateLimiter {
    /// A bucket refilled with `rate` tokens per second, holding at most `burst`.
    ///
    /// The period `1 s / rate` is rounded to the nearest nanosecond (at least 1 ns, so rates
    /// above 10^9 per second act as 10^9).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] if `rate` or `burst` is zero, [`ConfigError::HorizonTooLong`] if
    /// `burst / rate` exceeds the horizon.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::BucketRateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// assert!(BucketRateLimiter::per_second(10, 100).is_ok());
    /// assert!(BucketRateLimiter::per_second(0, 100).is_err());
    /// # }
    /// ```
    pub fn per_second(rate: u32, burst: u32) -> Result<Self, ConfigError> {
        Gcra::per_second(rate, burst).map(|g| Self::from_gcra(g, burst))
    }

    /// A bucket refilled with `rate` tokens per second, fractional rates included (Go's
    /// `rate.Limit(2.5)`), holding at most `burst`; `f64::INFINITY` never waits (Go's `rate.Inf`,
    /// any burst).
    ///
    /// The period `1 s / rate` is rounded to the nearest nanosecond (at least 1 ns).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidRate`] for a negative or NaN rate, [`ConfigError::Zero`] for a zero
    /// rate or burst, [`ConfigError::PeriodTooLong`] below one token per
    /// [`MAX_PERIOD`](crate::MAX_PERIOD), [`ConfigError::HorizonTooLong`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::{BucketRateLimiter, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = BucketRateLimiter::with_rate(2.5, 1).unwrap();
    /// assert_eq!(b.period(), Duration::from_millis(400));
    /// let unlimited = BucketRateLimiter::with_rate(f64::INFINITY, 1).unwrap();
    /// assert_eq!(unlimited.reserve(), Duration::ZERO);
    /// assert_eq!(unlimited.reserve(), Duration::ZERO);
    /// assert!(BucketRateLimiter::with_rate(f64::NAN, 1).is_err());
    /// # }
    /// ```
    pub fn with_rate(rate: f64, burst: u32) -> Result<Self, ConfigError> {
        Gcra::per_second_f64(rate, burst).map(|g| Self::from_gcra(g, burst))
    }

    /// A bucket gaining one token every `period`, holding at most `burst`.
    ///
    /// Periods are whole nanoseconds.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroDuration`] for a zero period, [`ConfigError::Zero`] for a zero burst,
    /// [`ConfigError::PeriodTooLong`] beyond [`MAX_PERIOD`](crate::MAX_PERIOD),
    /// [`ConfigError::HorizonTooLong`] if `burst × period` plus
    /// [`MAX_DELAY`](crate::MAX_DELAY) exceeds [`MAX_HORIZON`](crate::MAX_HORIZON).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::BucketRateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = BucketRateLimiter::with_period(Duration::from_millis(100), 1).unwrap();
    /// assert_eq!(b.period(), Duration::from_millis(100));
    /// # }
    /// ```
    pub fn with_period(period: Duration, burst: u32) -> Result<Self, ConfigError> {
        Gcra::with_period(period, burst).map(|g| Self::from_gcra(g, burst))
    }

    /// A bucket that never makes anyone wait: Go's `rate.NewLimiter(rate.Inf, _)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_ratelimit::BucketRateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = BucketRateLimiter::unlimited();
    /// assert!((0..1000).all(|_| b.reserve() == Duration::ZERO));
    /// assert_eq!(b.period(), Duration::ZERO);
    /// # }
    /// ```
    pub fn unlimited() -> Self {
        Self::from_gcra(Gcra::UNLIMITED, 0)
    }

    pub(crate) fn from_gcra(gcra: Gcra, burst: u32) -> Self {
        Self {
            gcra,
            burst,
            clock: TokioClock::new(),
            tat: AtomicU64::new(0),
        }
    }

    /// The refill period (time per token; zero for an [`unlimited`](Self::unlimited) bucket).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = ctrlq_ratelimit::BucketRateLimiter::per_second(10, 100).unwrap();
    /// assert_eq!(b.period(), std::time::Duration::from_millis(100));
    /// # }
    /// ```
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.gcra.period_ns())
    }

    /// The bucket capacity (as given; 0 for [`unlimited`](Self::unlimited), which has none).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let b = ctrlq_ratelimit::BucketRateLimiter::per_second(10, 100).unwrap();
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
    /// let b = ctrlq_ratelimit::BucketRateLimiter::per_second(1, 1).unwrap();
    /// assert!(b.reserve().is_zero());
    /// assert_eq!(b.reserve(), std::time::Duration::from_secs(1));
    /// # }
    /// ```
    pub fn reserve(&self) -> Duration {
        if self.gcra.is_unlimited() {
            // Go's `rate.Inf`: free, and no state changes.
            return Duration::ZERO;
        }
        let now = self.clock.elapsed_ns();
        // NOTE: Relaxed suffices: the bucket is this one atomic, and a compare-and-swap always
        // acts on its latest value; no other memory is published through it.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let claim = self.gcra.claim(tat, now);
            let Some((_, next)) = claim else {
                tracing::debug!("bucket reservation beyond the cap: nothing claimed");
                return claim_delay(claim);
            };
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return claim_delay(claim),
                Err(seen) => tat = seen,
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
