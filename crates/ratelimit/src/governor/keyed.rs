//! A user's keyed governor rate limiter as a retry limiter.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ::governor::clock::Clock;
use ::governor::middleware::NoOpMiddleware;
use ::governor::state::keyed::{DefaultKeyedStateStore, KeyedStateStore};

use super::TokioClock;
use crate::RateLimiter;

/// The governor limiter [`GovernorKeyedRateLimiter`] wraps.
type Keyed<K, S, C> = ::governor::RateLimiter<K, S, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A keyed governor `RateLimiter`, keyed by the queue's key, used as a retry limiter: each key
/// has its own cells, in a quota the application may also take from with `check_key`.
///
/// [`when`](RateLimiter::when) calls governor's `check_key`: a conforming call takes the key's
/// cell and returns zero; a refused one takes nothing and returns the wait until the key's next
/// conforming instant. It does **not reserve** (see [`GovernorRateLimiter`](super::GovernorRateLimiter)
/// and the [module docs](super)). [`forget`](RateLimiter::forget) does nothing (governor keeps
/// the key's state until its own `retain_recent`) and [`num_requeues`](RateLimiter::num_requeues)
/// is 0. Build the governor limiter with [`TokioClock`] so paused tests drive it.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ctrlq_ratelimit::RateLimiter;
/// use ctrlq_ratelimit::governor::{GovernorKeyedRateLimiter, TokioClock};
/// use governor::Quota;
/// use governor::state::keyed::DefaultKeyedStateStore;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let quota = Quota::per_second(NonZeroU32::new(2).unwrap()); // per key
/// let shared = Arc::new(governor::RateLimiter::new(
///     quota,
///     DefaultKeyedStateStore::<String>::default(),
///     TokioClock,
/// ));
/// let retries = GovernorKeyedRateLimiter::new(shared);
/// let (a, b) = ("ns/a".to_string(), "ns/b".to_string());
/// assert_eq!(retries.when(&a), Duration::ZERO);
/// assert_eq!(retries.when(&a), Duration::ZERO);
/// assert_eq!(retries.when(&a), Duration::from_millis(500));
/// assert_eq!(retries.when(&b), Duration::ZERO); // its own cells
/// # }
/// ```
pub struct GovernorKeyedRateLimiter<K, S = DefaultKeyedStateStore<K>, C = TokioClock>
where
    K: Hash,
    S: KeyedStateStore<K>,
    C: Clock,
{
    limiter: Arc<Keyed<K, S, C>>,
    /// Names `K`, which governor's type names only through `S`'s associated type.
    key: PhantomData<fn(&K)>,
}

impl<K: Hash, S: KeyedStateStore<K>, C: Clock> GovernorKeyedRateLimiter<K, S, C> {
    /// Uses `limiter` for retries; the application keeps its own handle to it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use ctrlq_ratelimit::governor::{GovernorKeyedRateLimiter, TokioClock};
    /// use governor::Quota;
    /// use governor::state::keyed::DefaultKeyedStateStore;
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
    /// let store = DefaultKeyedStateStore::<u64>::default();
    /// let limiter = Arc::new(governor::RateLimiter::new(quota, store, TokioClock));
    /// let retries = GovernorKeyedRateLimiter::new(limiter);
    /// assert_eq!(retries.governor().clock(), &TokioClock);
    /// ```
    pub fn new(limiter: Arc<Keyed<K, S, C>>) -> Self {
        Self {
            limiter,
            key: PhantomData,
        }
    }

    /// The governor limiter this uses.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use ctrlq_ratelimit::governor::{GovernorKeyedRateLimiter, TokioClock};
    /// use governor::Quota;
    /// use governor::state::keyed::DefaultKeyedStateStore;
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
    /// let store = DefaultKeyedStateStore::<u64>::default();
    /// let limiter = Arc::new(governor::RateLimiter::new(quota, store, TokioClock));
    /// let retries = GovernorKeyedRateLimiter::new(limiter.clone());
    /// assert!(Arc::ptr_eq(retries.governor(), &limiter));
    /// ```
    pub fn governor(&self) -> &Arc<Keyed<K, S, C>> {
        &self.limiter
    }
}

impl<K: Hash, S: KeyedStateStore<K>, C: Clock> From<Arc<Keyed<K, S, C>>>
    for GovernorKeyedRateLimiter<K, S, C>
{
    fn from(limiter: Arc<Keyed<K, S, C>>) -> Self {
        Self::new(limiter)
    }
}

impl<K: Hash, S: KeyedStateStore<K>, C: Clock> fmt::Debug for GovernorKeyedRateLimiter<K, S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernorKeyedRateLimiter")
            .finish_non_exhaustive()
    }
}

impl<K, S, C> RateLimiter<K> for GovernorKeyedRateLimiter<K, S, C>
where
    K: Hash + Send + Sync,
    S: KeyedStateStore<K> + Send + Sync,
    C: Clock + Send + Sync,
{
    fn when(&self, key: &K) -> Duration {
        match self.limiter.check_key(key) {
            Ok(()) => Duration::ZERO,
            Err(not_until) => not_until.wait_time_from(self.limiter.clock().now()),
        }
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
}
