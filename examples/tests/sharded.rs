//! The `--shards` mode on each backend: in memory (paused time), on the Lease API emulation
//! (real HTTP, paused time) and on a real etcd (started by the test, real time).

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

#[cfg(feature = "kube")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn sharded_on_the_lease_api() {
    use ctrlq_leader::LeaseLock;
    use ctrlq_leader::lease_emulation::LeaseServer;
    let server = LeaseServer::start();
    let mut clients = std::collections::HashMap::new();
    for i in 0..4 {
        let id = format!("replica-{i}");
        clients.insert(id.clone(), server.client(&id).await.unwrap());
    }
    let o = ShardedOptions {
        shards: 6,
        ..ShardedOptions::default()
    };
    let summary = run(&o, move |id, name| {
        LeaseLock::new(clients[id].clone(), "default", name, id)
            .label("ctrlq.io/controller", "objects")
            .request_timeout(examples::controller::REQUEST_TIMEOUT)
    })
    .await
    .unwrap();
    check(&summary, 6);
}
