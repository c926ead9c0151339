//! The pod scheduler example (`examples::pod_scheduler`, on ctrlq's scheduling queue) beside
//! kube-scheduler, on one control plane this program starts (kube-apiserver and etcd built by
//! `scripts/install-controlplane`, started by `ctrlq-envtest`), one side at a time,
//! interleaved round by round. Two workloads per round and side, each in a namespace and on
//! Nodes of its own (removed after it):
//!
//! - throughput: `--nodes` Nodes (16 CPU, 32 GiB) and `--pods` Pods (1 CPU, 1 GiB) created
//!   first, then the scheduler started; pods bound per second from the first bind to the last,
//!   as a watch of the namespace sees them, and the time from the start to the first bind;
//! - waiting: the scheduler running, a Node too small for any of `--waiting` Pods (1 CPU each)
//!   until every Pod's `PodScheduled` is `False`; then a Node with room for all of them, and
//!   the time from its creation to the last Pod bound.
//!
//! Per run, one JSON line; from the API server's own metrics (`apiserver_request_total`,
//! `apiserver_request_duration_seconds`), the binds and `pods/status` writes the run made and
//! their mean latency. kube-scheduler (`--kube-scheduler PATH`, built from the `k8s.io/kubernetes`
//! module at the control plane's version) runs with one profile restricted to the same fit
//! and score (`PrioritySort`, `SchedulingGates`, `NodeResourcesFit` least allocated over CPU and
//! memory, `DefaultBinder`), every node scored (`percentageOfNodesToScore: 100`), its client
//! unthrottled (QPS and burst 5000, as `scheduler_perf` sets them) and no leader election; ours
//! holds a Lease. Without `--kube-scheduler`, only ours runs.
//!
//! usage: `scheduler_apiserver [--rounds N] [--nodes N] [--pods N] [--waiting N]
//! [--kube-scheduler PATH]`

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use examples::pod_scheduler::{Scheduler, SchedulerConfig};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What a watch of one namespace saw: when each pod was first seen bound, and which pods have
/// `PodScheduled=False`.
#[derive(Default)]
struct Seen {
    bound: HashMap<String, Instant>,
    unschedulable: std::collections::HashSet<String>,
    listed: bool,
}

/// A scheduler side of a run, running until `stop`.
enum Running {
    Ours(CancellationToken, tokio::task::JoinHandle<u64>),
    Kube(Child),
}

#[derive(Clone)]
enum Side {
    Ours,
    Kube(PathBuf),
}

struct Args {
    rounds: usize,
    nodes: usize,
    pods: usize,
    waiting: usize,
    kube: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    let mut sides = vec![Side::Ours];
    if let Some(path) = &args.kube {
        sides.push(Side::Kube(path.clone()));
    }
    for round in 0..args.rounds {
        for side in &sides {
            throughput(&plane, &admin, side, round, &args).await;
            waiting(&plane, &admin, side, round, &args).await;
        }
    }
    Ok(())
}

fn parse_args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut args = Args {
        rounds: 2,
        nodes: 500,
        pods: 5_000,
        waiting: 500,
        kube: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => args.rounds = value.parse()?,
            "--nodes" => args.nodes = value.parse()?,
            "--pods" => args.pods = value.parse()?,
            "--waiting" => args.waiting = value.parse()?,
            "--kube-scheduler" => args.kube = Some(value.into()),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(args)
}

fn label(side: &Side) -> &'static str {
    match side {
        Side::Ours => "ctrlq",
        Side::Kube(_) => "kube-scheduler",
    }
}

/// The throughput workload: nodes and pods first, then the scheduler.
async fn throughput(plane: &ControlPlane, admin: &Client, side: &Side, round: usize, args: &Args) {
    let ns = format!("tp-{}-{round}", label(side));
    namespace(admin, &ns).await;
    let nodes = (0..args.nodes).map(|i| node(admin, &ns, format!("{ns}-{i:04}"), 16_000, 32 << 30));
    stream::iter(nodes)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let pods = (0..args.pods).map(|i| pod(&format!("p-{i:05}"), &ns, 1_000, 1 << 30));
    create(admin, &ns, pods.collect()).await;
    let seen = observe(admin, &ns).await;
    let before = api_counts(plane).await;
    let start = Instant::now();
    let running = start_side(plane, admin, side, &ns).await;
    let done = wait_for(&seen, Duration::from_secs(600), |s| {
        s.bound.len() >= args.pods
    })
    .await;
    let after = api_counts(plane).await;
    stop(running).await;
    let (first, last) = {
        let s = seen.lock().unwrap();
        (
            s.bound.values().min().copied(),
            s.bound.values().max().copied(),
        )
    };
    let (Some(first), Some(last)) = (first, last) else {
        println!(
            "{{\"side\":\"{}\",\"workload\":\"throughput\",\"error\":\"nothing bound\"}}",
            label(side)
        );
        return;
    };
    let span = last.duration_since(first).as_secs_f64();
    let line = json!({
        "side": label(side), "round": round, "workload": "throughput", "complete": done,
        "nodes": args.nodes, "pods": args.pods,
        "start_to_first_bind_s": first.duration_since(start).as_secs_f64(),
        "first_to_last_bind_s": span,
        "pods_per_s": (args.pods.saturating_sub(1)) as f64 / span.max(1e-9),
        "api": api_delta(&before, &after),
    });
    println!("{line}");
    cleanup(admin, &ns).await;
}

/// The waiting workload: pods that fit no node until one with room for all is created.
async fn waiting(plane: &ControlPlane, admin: &Client, side: &Side, round: usize, args: &Args) {
    let ns = format!("wt-{}-{round}", label(side));
    namespace(admin, &ns).await;
    node(admin, &ns, format!("{ns}-small"), 500, 1 << 30).await;
    let seen = observe(admin, &ns).await;
    let running = start_side(plane, admin, side, &ns).await;
    let pods = (0..args.waiting).map(|i| pod(&format!("w-{i:04}"), &ns, 1_000, 1 << 20));
    create(admin, &ns, pods.collect()).await;
    let n = args.waiting;
    let all_waiting = wait_for(&seen, Duration::from_secs(300), |s| {
        s.unschedulable.len() >= n
    })
    .await;
    let before = api_counts(plane).await;
    let created = Instant::now();
    let cpu = i64::try_from(n).unwrap_or(i64::MAX).saturating_mul(1_000);
    node(admin, &ns, format!("{ns}-large"), cpu, 1 << 40).await;
    let done = wait_for(&seen, Duration::from_secs(300), |s| s.bound.len() >= n).await;
    let after = api_counts(plane).await;
    stop(running).await;
    let last = seen.lock().unwrap().bound.values().max().copied();
    let line = json!({
        "side": label(side), "round": round, "workload": "waiting", "complete": all_waiting && done,
        "waiting": n,
        "node_to_last_bind_s": last.map(|l| l.saturating_duration_since(created).as_secs_f64()),
        "api": api_delta(&before, &after),
    });
    println!("{line}");
    cleanup(admin, &ns).await;
}

async fn start_side(plane: &ControlPlane, admin: &Client, side: &Side, name: &str) -> Running {
    match side {
        Side::Ours => {
            let config = SchedulerConfig::new(name, "bench")
                .lease(name, name)
                .nodes(format!("pool={name}"));
            let scheduler = Scheduler::new(admin.clone(), config).expect("valid settings");
            let stop = CancellationToken::new();
            let token = stop.clone();
            Running::Ours(
                stop,
                tokio::spawn(async move { scheduler.run(token).await }),
            )
        }
        Side::Kube(path) => {
            let config = kube_scheduler_config(plane, name);
            let file = plane.dir().join(format!("{name}.yaml"));
            std::fs::write(&file, config.to_string()).expect("the config file is written");
            // Its log, for when it does not schedule: it outlives the control plane's directory.
            let log = std::env::temp_dir().join(format!("scheduler_apiserver-{name}.log"));
            let log = std::fs::File::create(&log).expect("the log file is created");
            let child = Command::new(path)
                .arg(format!("--config={}", file.display()))
                .arg("--secure-port=0")
                .arg("-v=0")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("kube-scheduler starts");
            Running::Kube(child)
        }
    }
}

/// kube-scheduler's configuration (JSON is YAML): one profile for `name`, the same fit and
/// score as ours, every node scored, an unthrottled client, no leader election.
fn kube_scheduler_config(plane: &ControlPlane, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": plane.kubeconfig_file().display().to_string(),
            "qps": 5000, "burst": 5000,
        },
        "leaderElection": { "leaderElect": false },
        "percentageOfNodesToScore": 100,
        "profiles": [{
            "schedulerName": name,
            "plugins": { "multiPoint": {
                "enabled": [
                    { "name": "PrioritySort" }, { "name": "SchedulingGates" },
                    { "name": "NodeResourcesFit" }, { "name": "DefaultBinder" },
                ],
                "disabled": [{ "name": "*" }],
            } },
            "pluginConfig": [{ "name": "NodeResourcesFit", "args": {
                "scoringStrategy": { "type": "LeastAllocated", "resources": [
                    { "name": "cpu", "weight": 1 }, { "name": "memory", "weight": 1 },
                ] },
            } }],
        }],
    })
}

async fn stop(running: Running) {
    match running {
        Running::Ours(stop, task) => {
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        }
        Running::Kube(mut child) => {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A watch of the pods of `ns` in the background; returns once it has listed.
async fn observe(admin: &Client, ns: &str) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = seen.clone();
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher::watcher(pods, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let now = Instant::now();
            let mut s = sink.lock().unwrap();
            match event {
                Ok(Event::Apply(p) | Event::InitApply(p)) => {
                    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                        s.bound.entry(p.name_any()).or_insert(now);
                    }
                    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
                    let unschedulable = conditions
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
                    if unschedulable {
                        s.unschedulable.insert(p.name_any());
                    }
                }
                Ok(Event::InitDone) => s.listed = true,
                _ => {}
            }
        }
    });
    wait_for(&seen, Duration::from_secs(60), |s| s.listed).await;
    seen
}

/// Polls `seen` every 5 ms until `done` holds or `limit` passes; whether it held.
async fn wait_for(seen: &Mutex<Seen>, limit: Duration, done: impl Fn(&Seen) -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done(&seen.lock().unwrap()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// Binds (POST `pods/binding`) and `pods/status` writes so far, and their summed latency.
async fn api_counts(plane: &ControlPlane) -> [f64; 4] {
    let bind = ["resource=\"pods\"", "subresource=\"binding\""];
    let status = [
        "resource=\"pods\"",
        "subresource=\"status\"",
        "verb=\"PATCH\"",
    ];
    [
        plane.metric("apiserver_request_total", &bind).await,
        plane
            .metric("apiserver_request_duration_seconds_sum", &bind)
            .await,
        plane.metric("apiserver_request_total", &status).await,
        plane
            .metric("apiserver_request_duration_seconds_sum", &status)
            .await,
    ]
}

fn api_delta(before: &[f64; 4], after: &[f64; 4]) -> serde_json::Value {
    let d: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let mean_ms = |sum: f64, n: f64| if n > 0.0 { 1e3 * sum / n } else { 0.0 };
    json!({
        "binds": d[0], "bind_mean_ms": mean_ms(d[1], d[0]),
        "status_patches": d[2], "status_patch_mean_ms": mean_ms(d[3], d[2]),
    })
}

async fn namespace(admin: &Client, ns: &str) {
    create_namespace(admin, ns).await;
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } })).expect("valid");
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("the default ServiceAccount");
}

/// A node of pool `pool` with `cpu` millicores and `memory` bytes: created, then its status.
async fn node(admin: &Client, pool: &str, name: String, cpu: i64, memory: i64) {
    let nodes = Api::<Node>::all(admin.clone());
    let node: Node =
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": { "pool": pool } } }))
            .expect("valid");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node created");
    // kube-scheduler's fit also counts pods against `pods`; ours does not: room for all.
    let list = json!({ "cpu": format!("{cpu}m"), "memory": memory.to_string(), "pods": "100000" });
    let status = json!({ "status": { "capacity": list, "allocatable": list } });
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status written");
}

fn pod(name: &str, scheduler: &str, cpu: i64, memory: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": format!("{cpu}m"), "memory": memory.to_string() } },
            }],
        },
    }))
    .expect("valid")
}

async fn create(admin: &Client, ns: &str, pods: Vec<Pod>) {
    let api = Api::<Pod>::namespaced(admin.clone(), ns);
    let created: Vec<_> = stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for result in created {
        result.expect("pod created");
    }
}

/// Removes the pods of `ns` at once (no kubelet would confirm a graceful delete) and its nodes.
async fn cleanup(admin: &Client, ns: &str) {
    let now = DeleteParams::default().grace_period(0);
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    pods.delete_collection(&now, &ListParams::default())
        .await
        .expect("pods deleted");
    Api::<Node>::all(admin.clone())
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("pool={ns}")),
        )
        .await
        .expect("nodes deleted");
}
