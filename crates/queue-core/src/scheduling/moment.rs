//! [`Moment`]: the instant type the scheduling state is generic over, and the crate's
//! far-future limit.

use std::fmt;
use std::time::{Duration, Instant};

/// Where a deadline that does not fit in an instant is put instead: one year after its start.
/// A deadline that overflows (a huge backoff, say) lands there, so adding never fails.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_core::scheduling::FAR_FUTURE;
///
/// assert_eq!(FAR_FUTURE, Duration::from_secs(365 * 24 * 3600));
/// ```
pub const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

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
/// use ctrlq_queue_core::scheduling::Moment;
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

    /// `self + d`; where that does not fit, [`FAR_FUTURE`] after `self` (or `self` itself if
    /// even that does not fit). Never overflows.
    fn saturating_add(self, d: Duration) -> Self {
        Moment::checked_add(self, d)
            .or_else(|| Moment::checked_add(self, FAR_FUTURE))
            .unwrap_or(self)
    }
}

impl<I> Moment for I where I: Copy + Ord + fmt::Debug + From<Instant> + Into<Instant> {}
