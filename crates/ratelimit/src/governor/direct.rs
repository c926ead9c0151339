//! A user's direct governor rate limiter as a retry limiter.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::governor::clock::Clock;
use ::governor::middleware::NoOpMiddleware;
use ::governor::state::{DirectStateStore, InMemoryState, NotKeyed};

use super::TokioClock;
use crate::RateLimiter;

/// The governor limiter [`GovernorRateLimiter`] wraps.
type Direct<S, C> = ::governor::RateLimiter<NotKeyed, S, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A direct (not keyed) governor `RateLimiter` used as a retry limiter, so that a queue's
/// retries take cells from a quota the rest of the application shares.
///
/// [`when`](RateLimiter::when) calls governor's `check`: a conforming call takes a cell and
/// returns zero; a refused one takes nothing and returns the wait until the next conforming
/// instant. It does **not reserve**, unlike [`BucketRateLimiter`](crate::BucketRateLimiter):
/// every key refused at once is told the same wait (see the [module docs](super)).
/// [`forget`](RateLimiter::forget) does nothing and [`num_requeues`](RateLimiter::num_requeues)
/// is 0, as for client-go's `BucketRateLimiter`. Build the governor limiter with
/// [`TokioClock`] so paused tests drive it.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ctrlq_ratelimit::RateLimiter;
/// use ctrlq_ratelimit::governor::{GovernorRateLimiter, TokioClock};
/// use governor::Quota;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // The application's quota: 10 calls a second, bursts of 2.
/// let quota = Quota::per_second(NonZeroU32::new(10).unwrap()).allow_burst(NonZeroU32::new(2).unwrap());
/// let shared = Arc::new(governor::RateLimiter::direct_with_clock(quota, TokioClock));
/// let retries = GovernorRateLimiter::new(shared.clone());
///
/// assert!(shared.check().is_ok()); // the application takes one cell
/// assert_eq!(retries.when(&"a"), Duration::ZERO); // a retry takes the other
/// assert_eq!(retries.when(&"b"), Duration::from_millis(100)); // refused, nothing claimed
/// assert_eq!(retries.when(&"c"), Duration::from_millis(100)); // the same wait: no reservation
/// # }
/// ```
pub struct GovernorRateLimiter<S = InMemoryState, C = TokioClock>
where
    S: DirectStateStore,
    C: Clock,
{
    limiter: Arc<Direct<S, C>>,
}

impl<S: DirectStateStore, C: Clock> GovernorRateLimiter<S, C> {
    /// Uses `limiter` for retries; the application keeps its own handle to it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use ctrlq_ratelimit::governor::{GovernorRateLimiter, TokioClock};
    /// use governor::Quota;
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
    /// let limiter = Arc::new(governor::RateLimiter::direct_with_clock(quota, TokioClock));
    /// let retries = GovernorRateLimiter::new(limiter);
    /// assert_eq!(retries.governor().clock(), &TokioClock);
    /// ```
    pub fn new(limiter: Arc<Direct<S, C>>) -> Self {
        Self { limiter }
    }

    /// The governor limiter this uses.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use ctrlq_ratelimit::governor::{GovernorRateLimiter, TokioClock};
    /// use governor::Quota;
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
    /// let limiter = Arc::new(governor::RateLimiter::direct_with_clock(quota, TokioClock));
    /// let retries = GovernorRateLimiter::new(limiter.clone());
    /// assert!(Arc::ptr_eq(retries.governor(), &limiter));
    /// ```
    pub fn governor(&self) -> &Arc<Direct<S, C>> {
        &self.limiter
    }
}

impl<S: DirectStateStore, C: Clock> From<Arc<Direct<S, C>>> for GovernorRateLimiter<S, C> {
    fn from(limiter: Arc<Direct<S, C>>) -> Self {
        Self::new(limiter)
    }
}

impl<S: DirectStateStore, C: Clock> fmt::Debug for GovernorRateLimiter<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernorRateLimiter")
            .finish_non_exhaustive()
    }
}

impl<K, S, C> RateLimiter<K> for GovernorRateLimiter<S, C>
where
    K: ?Sized,
    S: DirectStateStore + Send + Sync,
    C: Clock + Send + Sync,
{
    fn when(&self, _key: &K) -> Duration {
        match self.limiter.check() {
            Ok(()) => Duration::ZERO,
            Err(not_until) => not_until.wait_time_from(self.limiter.clock().now()),
        }
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
}
