//! The multi-lock: migrating an election between two stores.

use std::time::Duration;

use ctrlq_leader::{
    LeaderElectionConfig, LeaderElector, Lock, MemoryStore, MultiLock, UNKNOWN_LEADER,
};
use tokio_util::sync::CancellationToken;

#[tokio::test(start_paused = true)]
async fn multi_lock_should_write_both_stores_and_renew_both() {
    let (new, old) = (MemoryStore::new(), MemoryStore::new());
    let e = LeaderElector::new(
        MultiLock::new(new.lock("a"), old.lock("a")),
        LeaderElectionConfig::default(),
    )
    .unwrap();
    e.run(CancellationToken::new(), |_| {
        tokio::time::sleep(Duration::from_secs(3))
    })
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
