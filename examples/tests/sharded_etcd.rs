//! The `--shards` mode on a real etcd (started by the test): the replicas settle, follow a kill
//! and a join, and no key is in two reconciles at once. Real time (about 10 s).

use ctrlq_leader::EtcdLock;
use examples::controller::REQUEST_TIMEOUT;
use examples::sharded::{ShardedOptions, run};
#[path = "../../crates/leader/tests/support/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;

use etcd_server::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_on_etcd() {
    let etcd = EtcdServer::start().await;
    let client = etcd_client::Client::connect([etcd.url()], None)
        .await
        .unwrap();
    let o = ShardedOptions {
        shards: 6,
        objects: 60,
        record_prefix: "/ctrlq/test/".to_owned(),
        ..ShardedOptions::default()
    };
    let summary = run(&o, move |id, name| {
        EtcdLock::new(client.clone(), name, id).request_timeout(REQUEST_TIMEOUT)
    })
    .await
    .unwrap();
    assert_eq!(
        (summary.overlaps, summary.stale),
        (0, 0),
        "{}",
        summary.render()
    );
    let held: usize = summary.held.iter().map(|(_, n)| n).sum();
    assert_eq!(held, 6, "{}", summary.render());
}
