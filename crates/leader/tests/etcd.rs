//! Two electors contend on a real etcd started by the test (127.0.0.1, free ports, temp dir).
//!
//! This test runs on real time because the store is a real server; its bounds carry a margin.

use std::sync::Arc;
use std::time::Duration;

#[path = "support/etcd_server.rs"]
mod etcd_server;

use ctrlq_leader::{EtcdLock, LeaderElectionConfig, LeaderElector, Lock};
use etcd_server::EtcdServer;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(3))
        .renew_deadline(Duration::from_secs(2))
        .retry_period(Duration::from_millis(400))
}

async fn elector(url: &str, id: &str) -> Arc<LeaderElector<EtcdLock>> {
    let client = etcd_client::Client::connect([url], None).await.unwrap();
    // Each request bounded within the short renew deadline, as the elector requires.
    let lock = EtcdLock::new(client, "/leader-test", id).request_timeout(Duration::from_secs(1));
    Arc::new(LeaderElector::new(lock, config()).unwrap())
}

/// Runs `e` until its leadership ends; returns when it started and when it stopped leading.
fn spawn(e: Arc<LeaderElector<EtcdLock>>) -> tokio::task::JoinHandle<Option<(Instant, Instant)>> {
    tokio::spawn(async move {
        e.run(CancellationToken::new(), |l| async move {
            let start = Instant::now();
            l.token().cancelled().await;
            (start, Instant::now())
        })
        .await
    })
}

#[tokio::test]
async fn etcd_electors_should_fail_over_and_step_down_when_etcd_stops() {
    let mut etcd = EtcdServer::start().await;
    let a = elector(etcd.url(), "a").await;
    let b = elector(etcd.url(), "b").await;
    let mut a_leading = a.subscribe_status();
    let ta = spawn(a.clone());
    a_leading.wait_for(|s| s.leading).await.unwrap();
    let mut b_leading = b.subscribe_status();
    let tb = spawn(b.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b_leading.borrow().leading, "b must not lead while a does");
    assert_eq!(b.subscribe_status().borrow().leader, "a");

    // Crash the leader: b takes over within LD + 4.4 RP (plus request latency).
    let last_renew = a.observed_at();
    ta.abort();
    b_leading.wait_for(|s| s.leading).await.unwrap();
    let failover = last_renew.elapsed();
    let bound = Duration::from_secs(3)
        + Duration::from_millis(400).mul_f64(4.4)
        + Duration::from_millis(500);
    assert!(failover >= Duration::from_secs(3), "{failover:?}");
    assert!(failover <= bound, "{failover:?} > {bound:?}");

    // Stop etcd while b leads: b steps down within RP + RD of its last renew.
    let last_renew = b.observed_at();
    etcd.stop();
    let (_, end) = tb.await.unwrap().unwrap();
    let stepped = end - last_renew;
    assert!(
        stepped <= Duration::from_millis(2400) + Duration::from_millis(100),
        "{stepped:?}"
    );
    assert!(
        stepped < Duration::from_secs(3),
        "before anyone could take over: {stepped:?}"
    );
}

/// A server frozen (`SIGSTOP`) and thawed (`SIGCONT`) while one candidate leads: requests fail
/// at the lock's timeout instead of hanging, the leader steps down, and every later grant gets a
/// greater fencing token (the revision of the acquiring write).
#[tokio::test]
async fn etcd_fencing_should_increase_across_a_frozen_and_thawed_server() {
    let etcd = EtcdServer::start().await;
    let client = etcd_client::Client::connect([etcd.url()], None)
        .await
        .unwrap();
    let lock =
        EtcdLock::new(client, "/leader-fence", "a").request_timeout(Duration::from_millis(500));
    let e = LeaderElector::new(lock, config()).unwrap();
    let mut tokens = Vec::new();
    let etcd = &etcd;
    for _ in 0..3 {
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            e.run(CancellationToken::new(), |l| async move {
                etcd.freeze(true);
                l.token().cancelled().await;
                (l.fencing_token(), l.end_reason())
            }),
        )
        .await
        .expect("leads and steps down")
        .unwrap();
        assert_eq!(
            out.1,
            Some(ctrlq_leader::LeadershipEnd::RenewDeadlinePassed)
        );
        tokens.push(out.0);
        // Frozen: a request fails at the timeout rather than hanging.
        let start = Instant::now();
        assert!(e.lock().get().await.is_err());
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        etcd.freeze(false);
    }
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "strictly increasing: {tokens:?}"
    );
}

/// `list` is one prefix range read of full keys, in key order, each with its record and its
/// revision as the version.
#[tokio::test]
async fn etcd_list_should_read_the_keys_under_a_prefix() {
    use ctrlq_leader::{LeaderRecord, Lock};
    let etcd = EtcdServer::start().await;
    let client = etcd_client::Client::connect([etcd.url()], None)
        .await
        .unwrap();
    let lock = |key: &str, id: &str| EtcdLock::new(client.clone(), key, id);
    let record = |holder: &str| LeaderRecord {
        holder_identity: holder.into(),
        lease_duration_seconds: 15,
        ..LeaderRecord::default()
    };
    let v_b = lock("/pods-member-b", "b")
        .create(record("b"))
        .await
        .unwrap();
    lock("/pods-member-a", "a")
        .create(record("a"))
        .await
        .unwrap();
    lock("/pods-shard-0", "a")
        .create(record("a"))
        .await
        .unwrap();
    let listed = lock("/pods-member-a", "a")
        .list("/pods-member-")
        .await
        .unwrap();
    let names: Vec<_> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["/pods-member-a", "/pods-member-b"]);
    assert_eq!(listed[1].1.record.holder_identity, "b");
    assert_eq!(listed[1].1.version, v_b);
}
