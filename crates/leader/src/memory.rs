//! The in-memory lock: the embedded default and the test harness.
//!
//! Many candidates share one [`MemoryStore`]; each gets its own [`MemoryLock`]. The store logs
//! every operation and, with the `test-util` feature, injects faults per candidate (fail, delay,
//! partition, lose a race).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{LeaderRecord, Lock, LockError, Versioned};

/// A shared in-memory store for one leader record.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{Lock, MemoryStore};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let a = store.lock("a");
/// a.create(ctrlq_leader::LeaderRecord::default()).await.unwrap();
/// assert!(a.get().await.is_ok());
/// assert_eq!(store.operations(), vec![("a".to_string(), "create"), ("a".to_string(), "get")]);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<State>>,
}

/// One candidate's handle on a [`MemoryStore`].
///
/// # Examples
///
/// ```
/// let lock = ctrlq_leader::MemoryStore::new().lock("a");
/// assert_eq!(ctrlq_leader::Lock::describe(&lock), "memory/a");
/// ```
#[derive(Debug)]
pub struct MemoryLock {
    store: MemoryStore,
    identity: String,
    /// The version this lock last saw; guards `update`.
    last_seen: Mutex<Option<u64>>,
}

#[derive(Default)]
struct State {
    record: Option<(LeaderRecord, u64)>,
    next_version: u64,
    faults: HashMap<String, Faults>,
    log: Vec<(String, &'static str)>,
}

#[derive(Default)]
struct Faults {
    fail_next: u32,
    delay_next: u32,
    delay: Duration,
    partitioned: bool,
    lose_next_update: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("injected fault: {0}")]
struct Injected(&'static str);

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A lock on this store for the candidate `identity`.
    #[must_use]
    pub fn lock(&self, identity: impl Into<String>) -> MemoryLock {
        MemoryLock {
            store: self.clone(),
            identity: identity.into(),
            last_seen: Mutex::new(None),
        }
    }

    /// The stored record, if any.
    #[must_use]
    pub fn record(&self) -> Option<LeaderRecord> {
        self.state().record.as_ref().map(|(r, _)| r.clone())
    }

    /// Every operation so far as `(identity, "get" | "create" | "update")`, failed ones included.
    #[must_use]
    pub fn operations(&self) -> Vec<(String, &'static str)> {
        self.state().log.clone()
    }

    /// Fails the next `n` operations of `identity` with a backend error.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{Lock, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let a = store.lock("a");
    /// store.fail_next("a", 1);
    /// assert!(matches!(a.get().await, Err(ctrlq_leader::LockError::Backend(_))));
    /// assert!(matches!(a.get().await, Err(ctrlq_leader::LockError::NotFound)));
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn fail_next(&self, identity: &str, n: u32) {
        self.faults(identity, |f| f.fail_next = n);
    }

    /// Delays the next `n` operations of `identity` by `delay`: half before the operation reaches
    /// the store, half before its answer returns (a caller that gives up may miss a write that
    /// happened).
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn delay_next(&self, identity: &str, n: u32, delay: Duration) {
        self.faults(identity, |f| {
            f.delay_next = n;
            f.delay = delay;
        });
    }

    /// Cuts `identity` off from the store (every operation fails) or reconnects it.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{Lock, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let a = store.lock("a");
    /// store.partition("a", true);
    /// assert!(a.get().await.is_err());
    /// store.partition("a", false);
    /// assert!(matches!(a.get().await, Err(ctrlq_leader::LockError::NotFound)));
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn partition(&self, identity: &str, partitioned: bool) {
        self.faults(identity, |f| f.partitioned = partitioned);
    }

    /// Makes the next `n` updates of `identity` lose a race: another writer changes the version
    /// (record unchanged) just before, so they fail with [`LockError::Conflict`].
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn lose_next_update(&self, identity: &str, n: u32) {
        self.faults(identity, |f| f.lose_next_update = n);
    }

    #[cfg(feature = "test-util")]
    fn faults(&self, identity: &str, f: impl FnOnce(&mut Faults)) {
        f(self.state().faults.entry(identity.to_owned()).or_default());
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs the operation, sleeps if delayed, and fails it if a fault says so.
    async fn enter(&self, identity: &str, op: &'static str) -> Result<Duration, LockError> {
        let delay = {
            let mut s = self.state();
            s.log.push((identity.to_owned(), op));
            let f = s.faults.entry(identity.to_owned()).or_default();
            if f.delay_next > 0 {
                f.delay_next -= 1;
                Some(f.delay)
            } else {
                None
            }
        };
        let delay = delay.unwrap_or_default();
        tokio::time::sleep(delay / 2).await;
        let mut s = self.state();
        let f = s.faults.entry(identity.to_owned()).or_default();
        if f.partitioned {
            return Err(LockError::Backend(Box::new(Injected("partitioned"))));
        }
        if f.fail_next > 0 {
            f.fail_next -= 1;
            return Err(LockError::Backend(Box::new(Injected("failed"))));
        }
        Ok(delay - delay / 2)
    }
}

impl MemoryLock {
    fn apply_create(&self, record: LeaderRecord) -> Result<u64, LockError> {
        let mut s = self.store.state();
        if s.record.is_some() {
            return Err(LockError::AlreadyExists);
        }
        s.next_version += 1;
        let v = s.next_version;
        s.record = Some((record, v));
        Ok(v)
    }

    /// Compare-and-set against the version this lock last saw; a lost race bumps the version
    /// first.
    fn apply_update(&self, record: LeaderRecord) -> Result<u64, LockError> {
        let last = *self
            .last_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut s = self.store.state();
        let f = s.faults.entry(self.identity.clone()).or_default();
        let lose = f.lose_next_update > 0;
        f.lose_next_update = f.lose_next_update.saturating_sub(1);
        if lose {
            s.next_version += 1;
            let v = s.next_version;
            if let Some((_, ver)) = s.record.as_mut() {
                *ver = v;
            }
        }
        let current = s
            .record
            .as_ref()
            .map(|(_, v)| *v)
            .ok_or(LockError::NotFound)?;
        if last != Some(current) {
            return Err(LockError::Conflict);
        }
        s.next_version += 1;
        let v = s.next_version;
        s.record = Some((record, v));
        Ok(v)
    }

    fn seen(&self, v: Option<u64>) {
        *self
            .last_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = v;
    }
}

#[async_trait::async_trait]
impl Lock for MemoryLock {
    async fn get(&self) -> Result<Versioned, LockError> {
        let back = self.store.enter(&self.identity, "get").await?;
        let found = self.store.state().record.clone();
        tokio::time::sleep(back).await;
        let (record, v) = found.ok_or(LockError::NotFound)?;
        self.seen(Some(v));
        Ok(Versioned {
            record,
            version: v.to_string(),
        })
    }

    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        let back = self.store.enter(&self.identity, "create").await?;
        let v = self.apply_create(record)?;
        tokio::time::sleep(back).await;
        self.seen(Some(v));
        Ok(v.to_string())
    }

    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        let back = self.store.enter(&self.identity, "update").await?;
        let v = self.apply_update(record)?;
        tokio::time::sleep(back).await;
        self.seen(Some(v));
        Ok(v.to_string())
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("memory/{}", self.identity)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("MemoryStore")
            .field("record", &s.record)
            .field("operations", &s.log.len())
            .finish()
    }
}
