//! The buckets' clock: whole nanoseconds since construction, read from tokio's (pausable) clock.

use std::time::Instant;

/// Clock readings stop here: 2^63 − 1 ns, about 292 years after the bucket was built.
///
/// A bucket's state runs at most [`MAX_HORIZON`](crate::MAX_HORIZON) ahead of its clock, so
/// every instant a bucket stores fits a `u64`.
pub(crate) const CLOCK_MAX_NS: u64 = u64::MAX - crate::MAX_HORIZON.as_nanos() as u64;

/// A clock following `tokio::time::Instant` (paused time included), counting whole nanoseconds
/// since `base` so that all arithmetic is on `u64` (std `Instant` arithmetic costs more than the
/// whole reservation).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokioClock {
    base: Instant,
}

impl TokioClock {
    /// A clock whose zero is tokio's current instant.
    pub(crate) fn new() -> Self {
        Self {
            base: tokio::time::Instant::now().into_std(),
        }
    }

    /// Nanoseconds from `base` to tokio's current instant: 0 before `base`, and at most
    /// [`CLOCK_MAX_NS`].
    pub(crate) fn elapsed_ns(&self) -> u64 {
        let d = tokio::time::Instant::now()
            .into_std()
            .saturating_duration_since(self.base);
        u64::try_from(d.as_nanos()).map_or(CLOCK_MAX_NS, |ns| ns.min(CLOCK_MAX_NS))
    }
}
