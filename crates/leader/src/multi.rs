//! A lock over two backends, for migrating from one store to another.

use crate::{LeaderRecord, Lock, LockError, Versioned};

/// The holder reported when the primary and secondary records name different holders.
pub const UNKNOWN_LEADER: &str = "leaderelection.k8s.io/unknown";

/// A [`Lock`] that writes both a primary and a secondary lock, as client-go's `MultiLock`.
///
/// Run old replicas on the secondary and new ones on this multi-lock, then new ones on the
/// primary alone. `get` reads both; if the secondary is missing it is created from the primary;
/// if the holders differ the holder is reported as [`UNKNOWN_LEADER`], which no candidate can
/// renew, so the lease must expire first. `update` writes the primary, then the secondary (the
/// secondary is re-read first, as it is not compared). The version is both versions joined.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{Lock, MemoryStore, MultiLock};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (new, old) = (MemoryStore::new(), MemoryStore::new());
/// let lock = MultiLock::new(new.lock("a"), old.lock("a"));
/// lock.create(ctrlq_leader::LeaderRecord { holder_identity: "a".into(), ..Default::default() }).await.unwrap();
/// assert_eq!(old.record().unwrap().holder_identity, "a");
/// # }
/// ```
#[derive(Debug)]
pub struct MultiLock<P, S> {
    primary: P,
    secondary: S,
}

impl<P: Lock, S: Lock> MultiLock<P, S> {
    /// A lock writing `primary` first, then `secondary`.
    #[must_use]
    pub fn new(primary: P, secondary: S) -> Self {
        Self { primary, secondary }
    }
}

#[async_trait::async_trait]
impl<P: Lock, S: Lock> Lock for MultiLock<P, S> {
    async fn get(&self) -> Result<Versioned, LockError> {
        let mut p = self.primary.get().await?;
        let (holder, version) = match self.secondary.get().await {
            Ok(s) => (s.record.holder_identity, s.version),
            Err(LockError::NotFound) => {
                let created = self.secondary.create(p.record.clone()).await?;
                (p.record.holder_identity.clone(), created)
            }
            Err(e) => return Err(e),
        };
        if p.record.holder_identity != holder {
            p.record.holder_identity = UNKNOWN_LEADER.to_owned();
        }
        p.version = format!("{}|{version}", p.version);
        Ok(p)
    }

    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        let p = self.primary.create(record.clone()).await?;
        let s = self.secondary.create(record).await?;
        Ok(format!("{p}|{s}"))
    }

    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        let p = self.primary.update(record.clone()).await?;
        let s = match self.secondary.get().await {
            Ok(_) => self.secondary.update(record).await?,
            Err(LockError::NotFound) => self.secondary.create(record).await?,
            Err(e) => return Err(e),
        };
        Ok(format!("{p}|{s}"))
    }

    fn identity(&self) -> &str {
        self.primary.identity()
    }

    fn describe(&self) -> String {
        format!("{},{}", self.primary.describe(), self.secondary.describe())
    }

    /// The primary's records: the primary is the source of truth while migrating.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, LockError> {
        self.primary.list(prefix).await
    }

    /// The longer of the two locks' bounds.
    fn request_timeout(&self) -> Option<std::time::Duration> {
        self.primary
            .request_timeout()
            .max(self.secondary.request_timeout())
    }

    fn fit_request_timeout(&mut self, renew_deadline: std::time::Duration) {
        self.primary.fit_request_timeout(renew_deadline);
        self.secondary.fit_request_timeout(renew_deadline);
    }
}
