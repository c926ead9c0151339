//! The pluggable lock trait.

use crate::{LeaderRecord, LockError, Versioned};

/// A store for the leader record with compare-and-set updates.
///
/// Each lock instance belongs to one candidate and remembers the version it last saw (from `get`,
/// `create` or `update`); `update` must fail with [`LockError::Conflict`] if the stored version
/// differs, or if this instance has seen no version yet.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{Lock, MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = MemoryStore::new().lock("a");
/// assert!(matches!(lock.get().await, Err(ctrlq_leader::LockError::NotFound)));
/// assert_eq!(lock.identity(), "a");
/// # }
/// ```
#[async_trait::async_trait]
pub trait Lock: Send + Sync + 'static {
    /// Reads the record and its version.
    ///
    /// # Errors
    ///
    /// [`LockError::NotFound`] when there is no record; [`LockError::Backend`] on failure.
    async fn get(&self) -> Result<Versioned, LockError>;

    /// Creates the record.
    ///
    /// # Errors
    ///
    /// [`LockError::AlreadyExists`] when a record exists; [`LockError::Backend`] on failure.
    /// A [`LockError::NotFound`] (the place for the record is missing) is counted by the
    /// elector as a failure too.
    async fn create(&self, record: LeaderRecord) -> Result<String, LockError>;

    /// Replaces the record if its version is the one this lock last saw; returns the new version.
    ///
    /// # Errors
    ///
    /// [`LockError::Conflict`] when the version differs; [`LockError::NotFound`];
    /// [`LockError::Backend`] on failure.
    async fn update(&self, record: LeaderRecord) -> Result<String, LockError>;

    /// The fencing token of a grant: `granted` is the record this candidate wrote to acquire the
    /// lease and the version the store gave that write.
    ///
    /// It must strictly increase over the grants of every candidate on the same record. The
    /// default is the record's `leader_transitions`, which the elector increments on every
    /// acquisition (a takeover, a free lease, and the same holder acquiring again) and copies on
    /// every renew and release; it restarts at 0 if the record is deleted and created again. A
    /// store with a durable, totally ordered write counter (etcd's revision) does better.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderRecord, Lock, MemoryStore, Versioned};
    /// let lock = MemoryStore::new().lock("a");
    /// let mut record = LeaderRecord::default();
    /// record.leader_transitions = 4;
    /// assert_eq!(lock.fencing_token(&Versioned { record, version: "9".into() }), 4);
    /// ```
    fn fencing_token(&self, granted: &Versioned) -> u64 {
        u64::from(granted.record.leader_transitions)
    }

    /// This candidate's identity.
    fn identity(&self) -> &str;

    /// A description of the lock for logs, such as `namespace/name`.
    fn describe(&self) -> String;

    /// The bound this lock puts on each of its requests, if it has one (`None` by default).
    ///
    /// [`LeaderElector::new`](crate::LeaderElector::new) refuses a bound longer than the renew
    /// deadline ([`ConfigError::RequestTimeoutAboveRenewDeadline`](crate::ConfigError)): such a
    /// bound would never apply, as the renew deadline cuts a renew short first.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{Lock, MemoryStore};
    /// assert_eq!(MemoryStore::new().lock("a").request_timeout(), None);
    /// ```
    fn request_timeout(&self) -> Option<std::time::Duration> {
        None
    }

    /// Fits a request bound this lock chose by default to `renew_deadline`;
    /// [`LeaderElector::new`](crate::LeaderElector::new) calls it with its configuration's
    /// renew deadline before it checks the bound. The crate's network locks take client-go's
    /// `max(1 s, renew deadline / 2)`, at most the renew deadline, unless a bound was set
    /// explicitly (which is kept, and checked). The default does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_leader::{Lock, MemoryStore};
    /// let mut lock = MemoryStore::new().lock("a");
    /// lock.fit_request_timeout(Duration::from_secs(3));
    /// assert_eq!(lock.request_timeout(), None);
    /// ```
    fn fit_request_timeout(&mut self, renew_deadline: std::time::Duration) {
        let _ = renew_deadline;
    }

    /// The records of this lock's store whose names start with `prefix`, each with its name,
    /// in name order: what a sharded controller reads its members from. Names are as the
    /// backend keys them: the record name in memory, the Lease name, the full etcd key.
    ///
    /// The default answers [`LockError::Unsupported`]; the crate's locks all list.
    ///
    /// # Errors
    ///
    /// As the other operations, or [`LockError::Unsupported`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderRecord, Lock, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// store.named_lock("x-member-a", "a").create(LeaderRecord::default()).await.unwrap();
    /// let names: Vec<String> = store.lock("b").list("x-member-").await.unwrap()
    ///     .into_iter().map(|(name, _)| name).collect();
    /// assert_eq!(names, ["x-member-a"]);
    /// # }
    /// ```
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, LockError> {
        let _ = prefix;
        Err(LockError::Unsupported("list"))
    }
}
