//! Error types: lock operations, configuration and health.

use std::time::Duration;

/// An error from a [`Lock`](crate::Lock) operation.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The record does not exist.
    #[error("leader record not found")]
    NotFound,
    /// `create` found a record already there.
    #[error("leader record already exists")]
    AlreadyExists,
    /// `update` lost a compare-and-set: the record changed since this lock last saw it, or this
    /// lock has not seen it yet.
    #[error("leader record changed since it was last read")]
    Conflict,
    /// The store failed (unreachable, timed out, rejected the request).
    #[error("lock backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The lock does not offer this operation (a user's lock without
    /// [`list`](crate::Lock::list)).
    #[error("the lock does not support {0}")]
    Unsupported(&'static str),
}

/// The default bound on each request of the network locks: 5 s, half the default renew
/// deadline, as client-go's `max(1 s, renew deadline / 2)`, so one hung request cannot use up a
/// renew deadline and the acquire loop never hangs on a dead server.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The request bound a network lock takes by default under an elector whose renew deadline is
/// `renew_deadline`: client-go's `max(1 s, renew deadline / 2)`, at most the renew deadline.
#[cfg(any(feature = "kube", feature = "etcd"))]
pub(crate) fn fitted_request_timeout(renew_deadline: Duration) -> Duration {
    (renew_deadline / 2)
        .max(Duration::from_secs(1))
        .min(renew_deadline)
}

/// A lock request did not answer within its request timeout; the source of a
/// [`LockError::Backend`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let e = ctrlq_leader::RequestTimedOut(Duration::from_secs(5));
/// assert_eq!(e.to_string(), "lock request timed out after 5s");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("lock request timed out after {0:?}")]
pub struct RequestTimedOut(pub Duration);

/// A [`LeaderElectionConfig`](crate::LeaderElectionConfig) rule that was broken; each variant
/// carries the rejected values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The lease duration must be greater than the renew deadline.
    #[error(
        "lease duration must be greater than renew deadline ({lease_duration:?} <= {renew_deadline:?})"
    )]
    LeaseNotAboveRenewDeadline {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// The renew deadline must be greater than 1.2 times the retry period.
    #[error(
        "renew deadline must be greater than retry period * 1.2 ({renew_deadline:?}, {retry_period:?})"
    )]
    RenewDeadlineNotAboveJitteredRetry {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
    /// A duration was zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// The lease duration must exceed renew deadline plus retry period: the leader may keep
    /// acting for up to that long after its last successful renew.
    #[error(
        "lease duration must be greater than renew deadline + retry period ({lease_duration:?})"
    )]
    NoSafetyMargin {
        /// The lease duration.
        lease_duration: Duration,
    },
    /// The record stores the lease duration in whole seconds, so the lease duration must be a
    /// whole number of seconds (else followers would wait less than the leader assumes).
    #[error("lease duration must be a whole number of seconds ({0:?})")]
    LeaseNotWholeSeconds(Duration),
    /// The lock's identity is empty.
    #[error("lock identity is empty")]
    EmptyIdentity,
    /// The lock bounds each request by longer than the renew deadline, which cuts every renew
    /// short first (see [`Lock::request_timeout`](crate::Lock::request_timeout)).
    #[error(
        "the lock's request timeout must not exceed the renew deadline ({request_timeout:?} > {renew_deadline:?})"
    )]
    RequestTimeoutAboveRenewDeadline {
        /// The lock's bound on one request.
        request_timeout: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
}

/// The health check failed: this candidate leads but has not renewed for too long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed election to renew leadership on lease {name}")]
pub struct HealthError {
    /// The configured name of the election.
    pub name: String,
}
