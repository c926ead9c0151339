//! Time in the core: [`MAX_DELAY`], the workspace's one far-future limit, and [`Moment`], the
//! instant type the scheduling state is generic over.

use std::fmt;
use std::time::{Duration, Instant};

/// The workspace's one far-future limit: a year. The longest delay a delayed add honours and a
/// retry limiter returns (longer ones are clamped to it), and where a deadline that does not fit
/// in an instant is put instead (a huge backoff, say), so adding to an instant never fails.
/// tokio-util's `DelayQueue` panics about two years out; no work waits a year for a retry.
///
/// `ctrlq-ratelimit` keeps the same value for its limiters; a test of `ctrlq-queue-async`, which
/// sees both crates, checks that they agree.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_core::MAX_DELAY;
///
/// assert_eq!(MAX_DELAY, Duration::from_secs(365 * 24 * 3600));
/// ```
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// An instant the scheduling state can compute with: `std::time::Instant` (the default), or any
/// copyable, ordered type that converts to and from it, such as `tokio::time::Instant`. The
/// state never reads a clock: every operation that depends on time takes a `Moment` as `now`.
///
/// Implemented for every type that qualifies; there is nothing to implement.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use ctrlq_queue_core::Moment;
///
/// let t0 = Instant::now();
/// assert_eq!(Moment::checked_add(t0, Duration::from_secs(1)), Some(t0 + Duration::from_secs(1)));
/// assert!(Moment::saturating_add(t0, Duration::MAX) > t0);
/// ```
pub trait Moment: Copy + Ord + fmt::Debug + From<Instant> + Into<Instant> {
    /// `self + d`, or `None` if that does not fit.
    fn checked_add(self, d: Duration) -> Option<Self> {
        let std: Instant = self.into();
        Instant::checked_add(&std, d).map(Self::from)
    }

    /// `self + d`; where that does not fit, [`MAX_DELAY`] after `self` (or `self` itself if
    /// even that does not fit). Never overflows.
    fn saturating_add(self, d: Duration) -> Self {
        Moment::checked_add(self, d)
            .or_else(|| Moment::checked_add(self, MAX_DELAY))
            .unwrap_or(self)
    }
}

impl<I> Moment for I where I: Copy + Ord + fmt::Debug + From<Instant> + Into<Instant> {}
