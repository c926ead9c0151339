//! Elector configuration and its validation.

use std::time::Duration;

use crate::ConfigError;

/// Timing and behaviour of a [`LeaderElector`](crate::LeaderElector).
///
/// The defaults are Kubernetes' (15 s / 10 s / 2 s). Validation, in the original's order:
/// lease duration > renew deadline > 1.2 × retry period, all positive; then ours: the lease
/// duration is a whole number of seconds (the record stores whole seconds) and exceeds renew
/// deadline + retry period, because a leader may act for up to retry period + renew deadline
/// after sending its last successful renew, and it must stop before any follower can take over.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let config = ctrlq_leader::LeaderElectionConfig::default()
///     .lease_duration(Duration::from_secs(60))
///     .renew_deadline(Duration::from_secs(15))
///     .retry_period(Duration::from_secs(5));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    pub(crate) lease_duration: Duration,
    pub(crate) renew_deadline: Duration,
    pub(crate) retry_period: Duration,
    pub(crate) release_on_cancel: bool,
    pub(crate) grace_period: Duration,
    pub(crate) name: String,
    pub(crate) jitter_seed: Option<u64>,
}

/// How long a leader asked to stop keeps renewing while its work drains, by default: 30 s, the
/// default graceful shutdown timeout of controller-runtime's manager.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// The original's jitter factor: acquire retries wait `[1, 2.2)` × retry period.
pub(crate) const JITTER_FACTOR: f64 = 1.2;

/// The three durations of a [`LeaderElectionConfig`], as read back by
/// [`LeaderElectionConfig::timing`] (for code that schedules beside an elector, such as a
/// sharded controller's membership).
///
/// # Examples
///
/// ```
/// let timing = ctrlq_leader::LeaderElectionConfig::default().timing();
/// assert_eq!(timing.retry_period, std::time::Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionTiming {
    /// How long a record is valid after it was last seen to change.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it stops.
    pub renew_deadline: Duration,
    /// The time between tries.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Sets the lease duration (whole seconds).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// Sets the renew deadline.
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }

    /// Sets the retry period.
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }

    /// Release the lease when the run is cancelled, after the leading work has finished.
    #[must_use]
    pub fn release_on_cancel(mut self, yes: bool) -> Self {
        self.release_on_cancel = yes;
        self
    }

    /// Sets the grace period of a stop request (default [`DEFAULT_GRACE_PERIOD`], 30 s).
    ///
    /// When the `cancel` token given to [`run`](crate::LeaderElector::run) fires while leading,
    /// the work's [`Leadership::token`](crate::Leadership::token) fires at once, and the elector
    /// keeps renewing the lease until the work returns, for at most this long; no other
    /// candidate can lead meanwhile. When it runs out the elector stops renewing, as on a lost
    /// lease, and another candidate may lead once the lease expires. Zero stops renewing at once.
    ///
    /// Under `ctrlq_controller::Controller`, which bounds the reconciles' drain by its own grace
    /// period, the drain ends at the shorter of the two: set this one at least as long as the
    /// controller's.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = ctrlq_leader::LeaderElectionConfig::default().grace_period(Duration::from_secs(60));
    /// assert!(config.validate().is_ok());
    /// ```
    #[must_use]
    pub fn grace_period(mut self, d: Duration) -> Self {
        self.grace_period = d;
        self
    }

    /// Sets the election's name, used in logs and the health error.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Seeds the retry jitter (by default derived from the identity), for reproducible runs.
    #[must_use]
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.jitter_seed = Some(seed);
        self
    }

    /// The lease duration, renew deadline and retry period.
    #[must_use]
    pub fn timing(&self) -> ElectionTiming {
        ElectionTiming {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }

    /// Checks the rules listed on the type.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] broken.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let bad = ctrlq_leader::LeaderElectionConfig::default().renew_deadline(Duration::from_secs(2));
    /// assert!(bad.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (ld, rd, rp) = (self.lease_duration, self.renew_deadline, self.retry_period);
        if ld <= rd {
            return Err(ConfigError::LeaseNotAboveRenewDeadline {
                lease_duration: ld,
                renew_deadline: rd,
            });
        }
        // `mul_f64` panics past `Duration::MAX`; a jittered retry period that large exceeds
        // every renew deadline, so the rule is broken.
        let jittered = Duration::try_from_secs_f64(rp.as_secs_f64() * JITTER_FACTOR);
        if jittered.ok().is_none_or(|j| rd <= j) {
            return Err(ConfigError::RenewDeadlineNotAboveJitteredRetry {
                renew_deadline: rd,
                retry_period: rp,
            });
        }
        // The two rules above already keep the lease duration and the renew deadline positive.
        if rp.is_zero() {
            return Err(ConfigError::Zero("retry period"));
        }
        if ld.subsec_nanos() != 0 || ld.as_secs() > u64::from(u32::MAX) {
            return Err(ConfigError::LeaseNotWholeSeconds(ld));
        }
        if ld <= rd.saturating_add(rp) {
            return Err(ConfigError::NoSafetyMargin { lease_duration: ld });
        }
        Ok(())
    }
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
            grace_period: DEFAULT_GRACE_PERIOD,
            name: String::from("leader"),
            jitter_seed: None,
        }
    }
}
