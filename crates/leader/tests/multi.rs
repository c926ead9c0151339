//! The multi-lock: migrating an election between two stores.

use std::time::Duration;

use ctrlq_leader::{
    LeaderElectionConfig, LeaderElector, LeaderRecord, Lock, LockError, MemoryLock, MemoryStore,
    MultiLock, UNKNOWN_LEADER, Versioned,
};
use tokio_util::sync::CancellationToken;

#[path = "support/bounded.rs"]
mod bounded;
use bounded::bounded;

#[tokio::test(start_paused = true)]
async fn multi_lock_should_write_both_stores_and_renew_both() {
    let (new, old) = (MemoryStore::new(), MemoryStore::new());
    let e = LeaderElector::new(
        MultiLock::new(new.lock("a"), old.lock("a")),
        LeaderElectionConfig::default(),
    )
    .unwrap();
    bounded(e.run(CancellationToken::new(), |_| {
        tokio::time::sleep(Duration::from_secs(3))
    }))
    .await;
    assert_eq!(new.record().unwrap().holder_identity, "a");
    assert_eq!(old.record().unwrap().holder_identity, "a");
    assert_eq!(
        new.record().unwrap().renew_time,
        old.record().unwrap().renew_time,
        "the renew reached both"
    );
}

#[tokio::test(start_paused = true)]
async fn multi_lock_should_report_an_unknown_leader_when_the_stores_disagree() {
    let (new, old) = (MemoryStore::new(), MemoryStore::new());
    new.lock("x")
        .create(ctrlq_leader::LeaderRecord {
            holder_identity: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    old.lock("y")
        .create(ctrlq_leader::LeaderRecord {
            holder_identity: "y".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = MultiLock::new(new.lock("a"), old.lock("a"))
        .get()
        .await
        .unwrap();
    assert_eq!(got.record.holder_identity, UNKNOWN_LEADER);
}

#[tokio::test(start_paused = true)]
async fn multi_lock_should_create_a_missing_secondary_on_get() {
    let (new, old) = (MemoryStore::new(), MemoryStore::new());
    new.lock("x")
        .create(ctrlq_leader::LeaderRecord {
            holder_identity: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = MultiLock::new(new.lock("a"), old.lock("a"))
        .get()
        .await
        .unwrap();
    assert_eq!(got.record.holder_identity, "x");
    assert_eq!(old.record().unwrap().holder_identity, "x");
}

/// A lock with a bound on its requests, over the in-memory lock.
struct Bounded(MemoryLock, Duration);

#[async_trait::async_trait]
impl Lock for Bounded {
    async fn get(&self) -> Result<Versioned, LockError> {
        self.0.get().await
    }
    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        self.0.create(record).await
    }
    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        self.0.update(record).await
    }
    fn identity(&self) -> &str {
        self.0.identity()
    }
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn request_timeout(&self) -> Option<Duration> {
        Some(self.1)
    }
}

/// The multi-lock describes both locks, lists the primary's records (the source of truth while
/// migrating), answers a write with both versions, and bounds requests by the longer bound.
#[tokio::test(start_paused = true)]
async fn multi_lock_should_describe_list_version_and_bound_as_both_locks() {
    let (new, old) = (MemoryStore::new(), MemoryStore::new());
    let lock = MultiLock::new(new.lock("a"), old.lock("a"));
    assert_eq!(lock.describe(), "memory/a,memory/a");
    assert_eq!(lock.request_timeout(), None);
    assert_eq!(lock.create(LeaderRecord::default()).await.unwrap(), "1|1");
    assert_eq!(lock.get().await.unwrap().version, "1|1");
    assert_eq!(lock.update(LeaderRecord::default()).await.unwrap(), "2|2");

    new.named_lock("x-1", "a")
        .create(LeaderRecord::default())
        .await
        .unwrap();
    old.named_lock("x-2", "a")
        .create(LeaderRecord::default())
        .await
        .unwrap();
    let listed = lock.list("x-").await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["x-1"]);

    let bounded = MultiLock::new(
        Bounded(new.lock("a"), Duration::from_secs(2)),
        Bounded(old.lock("a"), Duration::from_secs(3)),
    );
    assert_eq!(bounded.request_timeout(), Some(Duration::from_secs(3)));
}
