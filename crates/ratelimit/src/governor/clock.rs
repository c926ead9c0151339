//! A governor [`Clock`] that reads tokio's clock.

use std::ops::Add;
use std::time::Duration;

use ::governor::clock::{Clock, Reference};
use ::governor::nanos::Nanos;

/// A governor [`Clock`] over `tokio::time::Instant::now()`: a governor `RateLimiter` built with
/// it follows `tokio::time::pause()` and `advance`, so tests drive it like any tokio timer.
///
/// `now()` reads the clock of the runtime the calling thread is in (the real clock outside any
/// runtime), as `tokio::time::Instant::now()` does.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use ctrlq_ratelimit::governor::TokioClock;
/// use governor::clock::Clock;
/// use governor::{Quota, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let limiter = RateLimiter::direct_with_clock(Quota::per_second(NonZeroU32::MIN), TokioClock);
/// assert!(limiter.check().is_ok());
/// let refused = limiter.check().unwrap_err();
/// let wait = refused.wait_time_from(TokioClock.now());
/// assert_eq!(wait, Duration::from_secs(1));
/// tokio::time::sleep(wait).await; // paused: the clock jumps there
/// assert!(limiter.check().is_ok());
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokioClock;

/// An instant of [`TokioClock`]: a `tokio::time::Instant` that governor can do arithmetic on.
///
/// # Examples
///
/// ```
/// use ctrlq_ratelimit::governor::{TokioClock, TokioInstant};
/// use governor::clock::Clock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let now: TokioInstant = TokioClock.now();
/// assert_eq!(now.into_inner(), tokio::time::Instant::now());
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokioInstant(pub tokio::time::Instant);

impl TokioInstant {
    /// The `tokio::time::Instant` this is.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_ratelimit::governor::TokioInstant;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let now = tokio::time::Instant::now();
    /// assert_eq!(TokioInstant(now).into_inner(), now);
    /// # }
    /// ```
    pub fn into_inner(self) -> tokio::time::Instant {
        self.0
    }
}

impl Clock for TokioClock {
    type Instant = TokioInstant;

    fn now(&self) -> TokioInstant {
        TokioInstant(tokio::time::Instant::now())
    }
}

impl Reference for TokioInstant {
    fn duration_since(&self, earlier: Self) -> Nanos {
        let d = self.0.saturating_duration_since(earlier.0);
        // Governor's `From<Duration>` panics past 2^64 ns (584 years); saturate instead.
        Nanos::new(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        self.0
            .checked_sub(Duration::from(duration))
            .map_or(*self, Self)
    }
}

impl Add<Nanos> for TokioInstant {
    type Output = Self;

    /// The instant `nanos` later, or the furthest the platform's `Instant` represents short of
    /// it: no addition panics.
    fn add(self, nanos: Nanos) -> Self {
        Self(furthest_within(self.0, Duration::from(nanos)))
    }
}

/// `from + step`, or where the platform's `Instant` stops short of it: the step halves until
/// the sum fits (a zero step always does).
fn furthest_within(from: tokio::time::Instant, mut step: Duration) -> tokio::time::Instant {
    loop {
        if let Some(t) = from.checked_add(step) {
            return t;
        }
        step /= 2;
    }
}

impl From<TokioInstant> for tokio::time::Instant {
    fn from(instant: TokioInstant) -> Self {
        instant.0
    }
}
