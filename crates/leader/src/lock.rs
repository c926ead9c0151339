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
/// use leader::{Lock, MemoryStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lock = MemoryStore::new().lock("a");
/// assert!(matches!(lock.get().await, Err(leader::LockError::NotFound)));
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
    async fn create(&self, record: LeaderRecord) -> Result<String, LockError>;

    /// Replaces the record if its version is the one this lock last saw; returns the new version.
    ///
    /// # Errors
    ///
    /// [`LockError::Conflict`] when the version differs; [`LockError::NotFound`];
    /// [`LockError::Backend`] on failure.
    async fn update(&self, record: LeaderRecord) -> Result<String, LockError>;

    /// This candidate's identity.
    fn identity(&self) -> &str;

    /// A description of the lock for logs, such as `namespace/name`.
    fn describe(&self) -> String;
}
