//! Replicas of a sharded controller as separate processes (the `replica` binary) on a real etcd
//! started by the test: one frozen with SIGSTOP past its leases and resumed with SIGCONT, and a
//! second process started with the identity of a live replica. Every replica prints each
//! reconcile's start (with its shard and fencing token) and end, with the wall-clock time; the
//! checks read those lines. Real time: about 25 s.

#[path = "../../crates/leader/tests/support/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;
#[path = "support/replicas.rs"]
mod replicas;

use std::time::Duration;

use etcd_server::EtcdServer;
use replicas::{Reconcile, Replica, assert_no_overlaps, now_ns, reconciles, settled, wait_until};

/// A replica frozen past its leases starts no reconcile on them when it resumes: the others
/// took its shards over with larger fencing tokens, and it either waits to re-acquire a shard
/// (a larger token still) or takes none. No key is in two reconciles at once, apart from the
/// frozen replica's reconciles that were running when the freeze began (what the fencing token
/// is for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_resumed_after_a_freeze_starts_nothing_on_lost_leases() {
    let etcd = EtcdServer::start().await;
    let prefix = "/ctrlq/freeze/";
    let mut a = Replica::start(etcd.url(), prefix, "a", "a");
    let mut b = Replica::start(etcd.url(), prefix, "b", "b");
    let mut c = Replica::start(etcd.url(), prefix, "c", "c");
    wait_until(
        Duration::from_secs(20),
        "three replicas settle at 2 shards each",
        || settled(&[&a, &b, &c], 2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.signal("-STOP");
    // After the signal was sent: whatever c started before this is in flight at the freeze.
    let stopped_at = now_ns();
    // Past the settle bound after a death for c's shards (2 s + 4.2 × 0.3 s = 3.26 s).
    wait_until(Duration::from_secs(10), "a and b hold every shard", || {
        settled(&[&a, &b], 3)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let resumed_at = now_ns();
    c.signal("-CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for r in [&mut a, &mut b, &mut c] {
        r.stop();
    }

    let (ra, rb, rc) = (reconciles(&a), reconciles(&b), reconciles(&c));
    assert!(
        rc.iter().any(|r| r.start < stopped_at),
        "c reconciled before the freeze"
    );
    // Nothing c started after it resumed ran on a term that another replica had superseded on
    // that shard before.
    let others: Vec<&Reconcile> = ra.iter().chain(&rb).collect();
    let stale: Vec<&Reconcile> = rc
        .iter()
        .filter(|r| r.start >= resumed_at)
        .filter(|r| {
            others
                .iter()
                .any(|o| o.shard == r.shard && o.token > r.token && o.start < r.start)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "{} reconciles started on lost leases after SIGCONT, the first: {:?}",
        stale.len(),
        stale.first()
    );
    // No key in two reconciles at once, leaving out c's reconciles in flight at the freeze.
    let all: Vec<Reconcile> = ra
        .iter()
        .chain(&rb)
        .chain(
            rc.iter()
                .filter(|r| !(r.start < stopped_at && r.end.is_none_or(|e| e > stopped_at))),
        )
        .cloned()
        .collect();
    assert_no_overlaps(&all);
}

/// A second process started with the identity of a live replica takes no shard and starts no
/// reconcile while the first renews; the first keeps its shards, and no key is in two
/// reconciles at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_an_identity_in_use_takes_no_shard() {
    let etcd = EtcdServer::start().await;
    let prefix = "/ctrlq/twin/";
    let mut a = Replica::start(etcd.url(), prefix, "a", "a");
    let mut b = Replica::start(etcd.url(), prefix, "b", "b");
    wait_until(
        Duration::from_secs(20),
        "two replicas settle at 3 shards each",
        || settled(&[&a, &b], 3),
    )
    .await;
    let before = a.held();
    let twin_at = now_ns();
    let mut twin = Replica::start(etcd.url(), prefix, "a-twin", "a");
    // Three lease durations: a twin that waited for a's records to expire would act by now.
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(twin.held().is_empty(), "the twin holds {:?}", twin.held());
        assert_eq!(a.held(), before, "a lost a shard to its twin");
    }
    // The twin first: once the first "a" shuts down gracefully (blanking its member record,
    // releasing its leases), the twin may rightly take its place.
    for r in [&mut twin, &mut a, &mut b] {
        r.stop();
    }
    let (ra, rb, rt) = (reconciles(&a), reconciles(&b), reconciles(&twin));
    assert!(rt.is_empty(), "the twin reconciled {} keys", rt.len());
    assert!(
        ra.iter().any(|r| r.start > twin_at + 5_000_000_000),
        "a went on reconciling"
    );
    let all: Vec<Reconcile> = ra.into_iter().chain(rb).collect();
    assert_no_overlaps(&all);
}
