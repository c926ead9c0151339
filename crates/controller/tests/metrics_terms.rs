//! The queue's gauges across terms: each term's fresh queue reports under the same series, and a
//! term that ends with keys still queued takes them off when its queue goes.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

fn depth(registry: &Registry) -> f64 {
    // The source's keys (plain keys: the normal priority) reach the term's queue as they come.
    value(registry, "workqueue_depth{name=\"pods\",priority=\"0\"}")
}

#[tokio::test(start_paused = true)]
async fn a_lost_term_leaves_no_phantom_depth() {
    let mut registry = Registry::default();
    let queue_metrics = ctrlq_queue_async::prometheus::QueueMetrics::register(&mut registry);
    let store = MemoryStore::new();
    let elector = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
    let shutdown = CancellationToken::new();
    // One worker busy for good with the first key: the other nine stay queued.
    let run = Controller::new("pods", |_key: u32, _ctx: Context| async {
        sleep(Duration::from_secs(3600)).await;
        Ok::<_, Infallible>(Action::Done)
    })
    .source(|| futures::stream::iter(0..10))
    .workers(1)
    .queue_metrics(queue_metrics)
    .leader_elector(Arc::new(elector))
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(depth(&registry), 9.0);
    // The lease is lost within retry period + renew deadline; the term ends and its queue goes.
    store.partition("a", true);
    sleep(Duration::from_secs(15)).await;
    assert_eq!(depth(&registry), 0.0, "the lost term's keys left the gauge");
    shutdown.cancel();
    run.await.unwrap();
}

fn value(registry: &Registry, series: &str) -> f64 {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    support::series_value(&text, series)
}

/// A sharded replica reports the shards it leads and the shards that came to it, each shard's
/// time from its lease won to its first reconcile, and the shards no replica holds.
#[tokio::test(start_paused = true)]
async fn a_sharded_replica_reports_its_shards() {
    use ctrlq_controller::shard::Sharding;
    let mut registry = Registry::default();
    let metrics = ctrlq_controller::prometheus::ControllerMetrics::register(&mut registry);
    let store = MemoryStore::new();
    let s = store.clone();
    let sharding = Sharding::new(
        4,
        "a",
        move |name: &str| s.named_lock(name, "a"),
        LeaderElectionConfig::default(),
    )
    .unwrap();
    let mut held = sharding.subscribe_held();
    let shutdown = CancellationToken::new();
    let reconciled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = reconciled.clone();
    let firsts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let f = firsts.clone();
    let unowned = Arc::new(std::sync::Mutex::new(Vec::new()));
    let u = unowned.clone();
    let run = Controller::new("pods", move |_key: u32, _ctx: Context| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok::<_, Infallible>(Action::Done) }
    })
    .source(|| futures::stream::iter(0..10))
    .metrics(metrics)
    .on_event(move |e| match e {
        ctrlq_controller::Event::FirstReconcile { shard, .. } => {
            f.lock().unwrap().push(shard.expect("a shard's term"));
        }
        ctrlq_controller::Event::ShardsUnowned { shards, .. } => {
            u.lock().unwrap().push(shards.to_vec());
        }
        _ => {}
    })
    .sharded(sharding)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    // Alone, it wins its 4 shards at its first tries.
    let all = held.wait_for(|h| h.len() == 4);
    support::bounded(Duration::from_secs(30), all)
        .await
        .unwrap();
    let held_series = "ctrlq_controller_shards_held{controller=\"pods\"}";
    let moves_series = "ctrlq_controller_shard_moves_total{controller=\"pods\"}";
    assert_eq!(value(&registry, held_series), 4.0);
    assert_eq!(value(&registry, moves_series), 4.0);
    // No shard had a lease at the first look; by the look after the wins, every one has.
    let unowned_series = "ctrlq_controller_shards_unowned{controller=\"pods\"}";
    // Several looks after: none reported again while none is unowned.
    sleep(Duration::from_secs(10)).await;
    assert_eq!(value(&registry, unowned_series), 0.0);
    assert_eq!(
        *unowned.lock().unwrap(),
        [vec![0, 1, 2, 3], vec![]],
        "reported while some are unowned, then once when none are"
    );
    let longest = "ctrlq_controller_shards_unowned_seconds{controller=\"pods\"}";
    assert_eq!(value(&registry, longest), 0.0);
    // The shards' keys are listed once the gains settle; every key once.
    let start = tokio::time::Instant::now();
    while reconciled.load(std::sync::atomic::Ordering::SeqCst) < 10 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "keys not reconciled"
        );
        sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    let summary = support::bounded(Duration::from_secs(60), run)
        .await
        .unwrap();
    assert_eq!(summary.reconciles, 10);
    assert_eq!(value(&registry, held_series), 0.0);
    assert_eq!(value(&registry, moves_series), 4.0);
    // One observation per shard whose term reconciled a key (10 keys over 4 shards).
    let firsts = firsts.lock().unwrap().len();
    assert!((1..=4).contains(&firsts), "{firsts}");
    let observed = value(
        &registry,
        "ctrlq_controller_first_reconcile_seconds_count{controller=\"pods\"}",
    );
    assert_eq!(observed, firsts as f64);
}
