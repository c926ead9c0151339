//! [`MAX_DELAY`], the workspace's one far-future limit.

use std::time::Duration;

/// The workspace's one far-future limit: a year. The longest delay a delayed add honours and a
/// retry limiter returns (longer ones are clamped to it), and where a deadline that does not fit
/// in an instant is put instead (a huge backoff, say), so adding to an instant never fails.
/// No work waits a year for a retry.
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
