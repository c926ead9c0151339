//! One replica process of a controller of ConfigMaps sharded by namespace on
//! `Watch::for_shards`, its shard and member records Leases: the process that
//! `benches/tests/shard_processes.rs` starts, kills and starts again.
//!
//! usage: `shard_replica KUBECONFIG LEASE_NAMESPACE ID SHARDS`
//!
//! Election timing: 4 s lease, 3 s renew deadline, 500 ms retry period; 2 workers; each
//! reconcile awaits 20 ms. Prints one JSON line per finished reconcile (`reconciled`: the key,
//! `version`: the resource version it read or null, `start_us` / `end_us`: wall-clock
//! microseconds), one per change of the shards it holds (`held`), and one per report of the
//! shards no replica holds (`unowned`, `longest_ms`). Runs until its stdin closes, then drains.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use benches::replicas::client_from;
use ctrlq_controller::kube::{Object, Watch};
use ctrlq_controller::shard::Sharding;
use ctrlq_controller::{Action, Context, Controller, Event};
use ctrlq_leader::{LeaderElectionConfig, LeaseLock};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn unix_us() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_micros()).expect("microseconds fit")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut next = || {
        args.next()
            .expect("usage: shard_replica KUBECONFIG LEASE_NAMESPACE ID SHARDS")
    };
    let (kubeconfig, leases_ns, id) = (next(), next(), next());
    let shards: u32 = next().parse().expect("SHARDS");
    let client = client_from(Path::new(&kubeconfig)).await;
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500));
    let (leases, me) = (client.clone(), id.clone());
    let sharding = Sharding::new(
        shards,
        id,
        move |name: &str| LeaseLock::new(leases.clone(), &leases_ns, name, &me),
        config,
    )
    .expect("a sharding")
    .by_namespace();
    let mut held = sharding.subscribe_held();
    let watch = Watch::<ConfigMap>::for_shards(client, watcher::Config::default(), &sharding)
        .expect("sharded by namespace");
    let controller = Controller::for_watch(
        "processes",
        &watch,
        |key: ObjectRef<ConfigMap>, cm: Object<ConfigMap>, _ctx: Context| async move {
            let start_us = unix_us();
            let version = cm.present().and_then(|cm| cm.resource_version());
            tokio::time::sleep(Duration::from_millis(20)).await;
            let key = format!("{}/{}", key.namespace.unwrap_or_default(), key.name);
            let line = json!({"reconciled": key, "version": version, "start_us": start_us, "end_us": unix_us()});
            println!("{line}");
            Ok::<_, kube::Error>(Action::Done)
        },
    )
    .workers(2)
    .grace_period(Duration::from_secs(2))
    .on_event(|e| {
        if let Event::ShardsUnowned { shards, longest } = e {
            let longest_ms = u64::try_from(longest.as_millis()).unwrap_or(u64::MAX);
            println!("{}", json!({"unowned": shards, "longest_ms": longest_ms}));
        }
    })
    .sharded(sharding);
    tokio::spawn(async move {
        while held.changed().await.is_ok() {
            let now: Vec<u32> = held.borrow_and_update().iter().copied().collect();
            println!("{}", json!({"held": now}));
        }
    });
    let stop = CancellationToken::new();
    let closed = stop.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
        }
        closed.cancel();
    });
    controller.run(stop).await;
}
