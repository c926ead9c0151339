//! Construction errors of the limiters.

use std::time::Duration;

/// Why a limiter could not be built from its parameters.
///
/// Every limiter validates its parameters once, at construction, so that `when` can never return a
/// zero delay by accident (client-go's hot-loop bug, kubernetes/kubernetes#31396) nor panic.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_ratelimit::{ConfigError, ExponentialRateLimiter};
///
/// let err = ExponentialRateLimiter::<String>::new(Duration::from_secs(2), Duration::from_secs(1))
///     .unwrap_err();
/// assert!(matches!(err, ConfigError::BaseAboveMax { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A delay parameter was zero.
    #[error("{name} must be greater than zero")]
    ZeroDuration {
        /// Which parameter.
        name: &'static str,
    },
    /// The base delay exceeds the maximum delay.
    #[error("base delay {base:?} exceeds max delay {max:?}")]
    BaseAboveMax {
        /// The rejected base.
        base: Duration,
        /// The rejected max.
        max: Duration,
    },
    /// A token bucket was given a zero rate or zero burst.
    #[error("{name} must be greater than zero")]
    Zero {
        /// Which parameter (`"rate"` or `"burst"`).
        name: &'static str,
    },
    /// A token bucket's refill period is longer than the supported maximum.
    #[error("refill period {period:?} exceeds the maximum {max:?}")]
    PeriodTooLong {
        /// The rejected period.
        period: Duration,
        /// The largest accepted period.
        max: Duration,
    },
    /// A token bucket's shape does not fit the horizon its arithmetic covers: `burst × period`
    /// plus [`MAX_DELAY`](crate::MAX_DELAY) exceeds
    /// [`MAX_HORIZON`](crate::MAX_HORIZON).
    #[error(
        "burst {burst} × period {period:?} plus the reservation cap exceeds the horizon {max:?}"
    )]
    HorizonTooLong {
        /// The rejected period.
        period: Duration,
        /// The rejected burst.
        burst: u32,
        /// The horizon.
        max: Duration,
    },
    /// A token bucket's rate was negative or not a number.
    #[error("rate must be a positive number of tokens per second, or infinity")]
    InvalidRate,
    /// A max-of limiter was given no children.
    #[error("a max-of limiter needs at least one child")]
    NoLimiters,
    /// A per-item limiter was given a zero capacity.
    #[error("max_keys must be greater than zero")]
    ZeroCapacity,
}
