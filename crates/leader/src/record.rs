//! The leader record stored in the lock.

use std::time::{Duration, SystemTime};

/// The leader record, as client-go's `LeaderElectionRecord`.
///
/// `acquire_time` and `renew_time` are wall-clock times for display and for other
/// implementations; the elector never compares them with its own clock.
///
/// # Examples
///
/// ```
/// let record = ctrlq_leader::LeaderRecord::default();
/// assert!(record.is_free());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRecord {
    /// The holder; empty means the lease is free.
    pub holder_identity: String,
    /// How long followers wait after the last observed change, in whole seconds.
    pub lease_duration_seconds: u32,
    /// When the current holder acquired the lease.
    pub acquire_time: SystemTime,
    /// When the current holder last renewed.
    pub renew_time: SystemTime,
    /// How many times the holder changed.
    pub leader_transitions: u32,
}

/// A record with the store's version of it (an in-memory counter, etcd's mod revision, a
/// Kubernetes resourceVersion).
///
/// # Examples
///
/// ```
/// let v = ctrlq_leader::Versioned { record: ctrlq_leader::LeaderRecord::default(), version: "1".into() };
/// assert_eq!(v.version, "1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The record.
    pub record: LeaderRecord,
    /// The opaque version; a change means the record was written.
    pub version: String,
}

impl LeaderRecord {
    /// A record naming `holder` for a lease of `lease_duration` (in whole seconds, saturating),
    /// with `leader_transitions`, acquired and renewed now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let record = ctrlq_leader::LeaderRecord::new("a", Duration::from_secs(15), 2);
    /// assert_eq!((record.lease_duration_seconds, record.leader_transitions), (15, 2));
    /// assert_eq!(record.acquire_time, record.renew_time);
    /// ```
    #[must_use]
    pub fn new(
        holder: impl Into<String>,
        lease_duration: Duration,
        leader_transitions: u32,
    ) -> Self {
        let now = SystemTime::now();
        Self {
            holder_identity: holder.into(),
            lease_duration_seconds: u32::try_from(lease_duration.as_secs()).unwrap_or(u32::MAX),
            acquire_time: now,
            renew_time: now,
            leader_transitions,
        }
    }

    /// The record a release writes in place of this one, as client-go's: free, a lease of one
    /// second, and this record's leader transitions (so the next grant's fencing token is
    /// larger still), written now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let held = ctrlq_leader::LeaderRecord::new("a", Duration::from_secs(15), 2);
    /// let released = held.released();
    /// assert!(released.is_free());
    /// assert_eq!((released.lease_duration_seconds, released.leader_transitions), (1, 2));
    /// ```
    #[must_use]
    pub fn released(&self) -> Self {
        Self::new("", Duration::from_secs(1), self.leader_transitions)
    }

    /// Whether nobody holds the lease.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut record = ctrlq_leader::LeaderRecord::default();
    /// record.holder_identity = "a".into();
    /// assert!(!record.is_free());
    /// ```
    #[must_use]
    pub fn is_free(&self) -> bool {
        self.holder_identity.is_empty()
    }
}

impl Default for LeaderRecord {
    fn default() -> Self {
        Self {
            holder_identity: String::new(),
            lease_duration_seconds: 0,
            acquire_time: SystemTime::UNIX_EPOCH,
            renew_time: SystemTime::UNIX_EPOCH,
            leader_transitions: 0,
        }
    }
}
