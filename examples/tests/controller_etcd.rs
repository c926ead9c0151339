//! The main example on a real etcd (started by the test): the election, the kill and the
//! takeover work the same as on the in-memory lock.
//!
//! Real time, because the store is a real server: the run is kept small (about 3 s).

use std::time::Duration;

use ctrlq_leader::EtcdLock;
use examples::controller::{Options, REQUEST_TIMEOUT, run};
#[path = "../../crates/leader/tests/support/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;

use etcd_server::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_fails_over_on_etcd() {
    let etcd = EtcdServer::start().await;
    let client = etcd_client::Client::connect([etcd.url()], None)
        .await
        .expect("connect to the test etcd");
    let options = Options {
        objects: 40,
        updates: 20,
        failure_rate: 0.2,
        workers: 2,
        event_interval: Duration::from_millis(10),
        ..Options::default()
    };
    let summary = run(&options, None, |id| {
        EtcdLock::new(client.clone(), "/example/leader", id).request_timeout(REQUEST_TIMEOUT)
    })
    .await
    .expect("the run completes");
    assert_eq!(summary.stale, 0, "{}", summary.render());
    let killed = summary.killed.clone().expect("the leader was killed");
    assert_ne!(summary.final_leader(), killed, "{}", summary.render());
    assert_eq!(summary.max_concurrent_leaders, 1);
    // Safety, not speed: the next leader can only start after the lease (1 s) expired.
    assert!(summary.failover.expect("a takeover") >= Duration::from_millis(600));
}
