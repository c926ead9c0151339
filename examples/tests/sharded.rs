//! The `--shards` mode in memory (paused time) and on a real kube-apiserver's Leases (started
//! by the test, real time); `tests/sharded_etcd.rs` runs it on a real etcd.

use examples::sharded::{ShardedOptions, ShardedSummary, run};

fn check(summary: &ShardedSummary, shards: usize) {
    assert_eq!(summary.overlaps, 0, "{}", summary.render());
    assert_eq!(summary.stale, 0, "{}", summary.render());
    let held: usize = summary.held.iter().map(|(_, n)| n).sum();
    assert_eq!(held, shards, "{}", summary.render());
    assert!(summary.moved_on_join >= 1, "{}", summary.render());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn sharded_in_memory() {
    let store = ctrlq_leader::MemoryStore::new();
    for seed in 1..=3 {
        let o = ShardedOptions {
            seed,
            record_prefix: format!("run-{seed}/"),
            ..ShardedOptions::default()
        };
        let s = store.clone();
        let summary = run(&o, move |id, name| s.named_lock(name, id))
            .await
            .unwrap();
        check(&summary, 12);
    }
}

/// On Kubernetes Leases in a real kube-apiserver (started by the test, real time, about 10 s),
/// labelled as a controller's Leases are.
#[cfg(feature = "kube")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_on_the_lease_api() {
    use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
    use ctrlq_leader::LeaseLock;
    let plane = ControlPlane::start().await;
    let client = plane.client(ADMIN);
    create_namespace(&client, "sharded").await;
    let o = ShardedOptions {
        shards: 6,
        objects: 60,
        ..ShardedOptions::default()
    };
    let summary = run(&o, move |id, name| {
        LeaseLock::new(client.clone(), "sharded", name, id)
            .label("ctrlq.io/controller", "objects")
            .request_timeout(examples::controller::REQUEST_TIMEOUT)
    })
    .await
    .unwrap();
    check(&summary, 6);
}
