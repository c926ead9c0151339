//! The in-memory lock: the embedded default and the test harness.
//!
//! Many candidates share one [`MemoryStore`]; each gets its own [`MemoryLock`]. With the
//! `test-util` feature the store logs every operation and injects faults per candidate (fail,
//! delay, partition, lose a race); without it, it keeps only the records, so a long-running
//! process that elects in memory does not grow a log.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{LeaderRecord, Lock, LockError, Versioned};

/// A shared in-memory store of leader records: the unnamed one that [`lock`](Self::lock) holds,
/// and named ones ([`named_lock`](Self::named_lock)), which [`Lock::list`] lists by prefix.
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
/// assert_eq!(store.record(), Some(ctrlq_leader::LeaderRecord::default()));
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
    /// The record's name (`""`: the unnamed record).
    name: String,
    identity: String,
    /// The version this lock last saw; guards `update`.
    last_seen: Mutex<Option<u64>>,
}

#[derive(Default)]
struct State {
    /// Records by name with their versions; the unnamed record is `""`.
    records: BTreeMap<String, (LeaderRecord, u64)>,
    next_version: u64,
    #[cfg(feature = "test-util")]
    log: Vec<(String, &'static str)>,
    #[cfg(feature = "test-util")]
    faults: std::collections::HashMap<String, Faults>,
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A lock on this store for the candidate `identity`.
    #[must_use]
    pub fn lock(&self, identity: impl Into<String>) -> MemoryLock {
        self.named_lock("", identity)
    }

    /// A lock on the record `name` of this store for the candidate `identity`: one store holds
    /// the records of many elections (a sharded controller's shards and members), and
    /// [`Lock::list`] lists them by name prefix. Faults injected for `identity` apply to all
    /// its locks.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderRecord, Lock, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// store.named_lock("pods-shard-0", "a").create(LeaderRecord::default()).await.unwrap();
    /// store.named_lock("pods-shard-1", "b").create(LeaderRecord::default()).await.unwrap();
    /// let listed = store.lock("c").list("pods-shard-").await.unwrap();
    /// assert_eq!(listed.len(), 2);
    /// assert_eq!(listed[0].0, "pods-shard-0");
    /// assert!(store.record_named("pods-shard-1").is_some());
    /// # }
    /// ```
    #[must_use]
    pub fn named_lock(&self, name: impl Into<String>, identity: impl Into<String>) -> MemoryLock {
        MemoryLock {
            store: self.clone(),
            name: name.into(),
            identity: identity.into(),
            last_seen: Mutex::new(None),
        }
    }

    /// The record named `name`, if any.
    #[must_use]
    pub fn record_named(&self, name: &str) -> Option<LeaderRecord> {
        self.inner.lock().records.get(name).map(|(r, _)| r.clone())
    }

    /// The stored unnamed record, if any.
    #[must_use]
    pub fn record(&self) -> Option<LeaderRecord> {
        self.record_named("")
    }
}

impl State {
    /// Stores `record` under `name` at a new version, and returns it.
    fn write(&mut self, name: &str, record: LeaderRecord) -> u64 {
        self.next_version += 1;
        self.records
            .insert(name.to_owned(), (record, self.next_version));
        self.next_version
    }
}

impl MemoryLock {
    /// One operation of this lock: `apply` runs at the store. With `test-util` the operation
    /// is logged as `name` and `apply` runs between the two halves of an injected delay, unless
    /// a fault fails the operation first (an error of `apply` returns at once).
    async fn op<T>(
        &self,
        #[cfg_attr(not(feature = "test-util"), expect(unused_variables))] name: &'static str,
        apply: impl FnOnce(&mut State) -> Result<T, LockError>,
    ) -> Result<T, LockError> {
        #[cfg(feature = "test-util")]
        let back = self.store.enter(&self.identity, name).await?;
        let out = apply(&mut self.store.inner.lock())?;
        #[cfg(feature = "test-util")]
        tokio::time::sleep(back).await;
        Ok(out)
    }

    /// Remembers `v` as the version this lock last saw, and returns it as the lock's version.
    fn seen(&self, v: u64) -> String {
        *self.last_seen.lock() = Some(v);
        v.to_string()
    }
}

#[async_trait::async_trait]
impl Lock for MemoryLock {
    async fn get(&self) -> Result<Versioned, LockError> {
        let found = self.op("get", |s| Ok(s.records.get(&self.name).cloned()));
        let (record, v) = found.await?.ok_or(LockError::NotFound)?;
        let version = self.seen(v);
        Ok(Versioned { record, version })
    }

    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        let created = self.op("create", |s| {
            if s.records.contains_key(&self.name) {
                return Err(LockError::AlreadyExists);
            }
            Ok(s.write(&self.name, record))
        });
        Ok(self.seen(created.await?))
    }

    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        let last = *self.last_seen.lock();
        let updated = self.op("update", |s| {
            #[cfg(feature = "test-util")]
            s.lose_race(&self.identity, &self.name);
            match s.records.get(&self.name) {
                None => Err(LockError::NotFound),
                Some((_, current)) if last != Some(*current) => Err(LockError::Conflict),
                Some(_) => Ok(s.write(&self.name, record)),
            }
        });
        Ok(self.seen(updated.await?))
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        if self.name.is_empty() {
            format!("memory/{}", self.identity)
        } else {
            format!("memory:{}/{}", self.name, self.identity)
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, LockError> {
        self.op("list", |s| {
            let found = s.records.range(prefix.to_owned()..);
            let found = found.take_while(|(name, _)| name.starts_with(prefix));
            Ok(found
                .map(|(name, (record, v))| {
                    let (record, version) = (record.clone(), v.to_string());
                    (name.clone(), Versioned { record, version })
                })
                .collect())
        })
        .await
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("MemoryStore")
            .field("records", &s.records)
            .finish_non_exhaustive()
    }
}

// ===== fault injection (`test-util`) =====

#[cfg(feature = "test-util")]
#[derive(Default)]
struct Faults {
    fail_next: u32,
    delay_next: u32,
    delay: std::time::Duration,
    partitioned: bool,
    lose_next_update: u32,
}

#[cfg(feature = "test-util")]
#[derive(Debug, thiserror::Error)]
#[error("injected fault: {0}")]
struct Injected(&'static str);

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
impl MemoryStore {
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
    pub fn fail_next(&self, identity: &str, n: u32) {
        self.faults(identity, |f| f.fail_next = n);
    }

    /// Delays the next `n` operations of `identity` by `delay`: half before the operation reaches
    /// the store, half before its answer returns (a caller that gives up may miss a write that
    /// happened).
    pub fn delay_next(&self, identity: &str, n: u32, delay: std::time::Duration) {
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
    pub fn partition(&self, identity: &str, partitioned: bool) {
        self.faults(identity, |f| f.partitioned = partitioned);
    }

    /// Makes the next `n` updates of `identity` lose a race: another writer changes the version
    /// (record unchanged) just before, so they fail with [`LockError::Conflict`].
    pub fn lose_next_update(&self, identity: &str, n: u32) {
        self.faults(identity, |f| f.lose_next_update = n);
    }

    /// Every operation so far as `(identity, "get" | "create" | "update" | "list")`, failed
    /// ones included.
    #[must_use]
    pub fn operations(&self) -> Vec<(String, &'static str)> {
        self.inner.lock().log.clone()
    }

    fn faults(&self, identity: &str, f: impl FnOnce(&mut Faults)) {
        f(self
            .inner
            .lock()
            .faults
            .entry(identity.to_owned())
            .or_default());
    }

    /// Logs the operation `op` of `identity` and applies its faults: sleeps the first half of
    /// an injected delay, then fails the operation if it is cut off or set to fail; else
    /// returns the second half of the delay, to sleep before the answer returns.
    async fn enter(
        &self,
        identity: &str,
        op: &'static str,
    ) -> Result<std::time::Duration, LockError> {
        self.inner.lock().log.push((identity.to_owned(), op));
        let mut delay = std::time::Duration::ZERO;
        self.faults(identity, |f| {
            if f.delay_next > 0 {
                f.delay_next -= 1;
                delay = f.delay;
            }
        });
        tokio::time::sleep(delay / 2).await;
        let mut failed = None;
        self.faults(identity, |f| {
            if f.partitioned {
                failed = Some("partitioned");
            } else if f.fail_next > 0 {
                f.fail_next -= 1;
                failed = Some("failed");
            }
        });
        match failed {
            Some(why) => Err(LockError::Backend(Box::new(Injected(why)))),
            None => Ok(delay - delay / 2),
        }
    }
}

#[cfg(feature = "test-util")]
impl State {
    /// Makes an update of `identity` lose a race if a fault says so: another writer changes
    /// the version of the record `name` (the record unchanged) just before.
    fn lose_race(&mut self, identity: &str, name: &str) {
        let f = self.faults.entry(identity.to_owned()).or_default();
        if f.lose_next_update == 0 {
            return;
        }
        f.lose_next_update -= 1;
        self.next_version += 1;
        if let Some((_, v)) = self.records.get_mut(name) {
            *v = self.next_version;
        }
    }
}
