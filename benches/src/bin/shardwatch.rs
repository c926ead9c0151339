//! Server-side sharded watches on a real kube-apiserver (`WORKLOADS.md`, "shardwatch"): what
//! each of `m` replicas lists, holds, receives and costs in memory when it watches only its
//! shard (`Watch::sharded`, the API server filtering by shard selector, KEP-5866), against the
//! same replicas each watching everything as a sharded controller's sources do today (every
//! replica lists and holds every object, and its runner drops the keys of other shards).
//!
//! One control plane started here with the `ShardedListAndWatch` gate on; `--configmaps N`
//! (20,000) ConfigMaps spread over `--namespaces` (50) namespaces `bench-00`…, created once.
//! Then for each replica count `m` of `--replicas` (1,2,3,4), each `--field` (uid, namespace)
//! and each mode (`server`: a `Watch::sharded` of shard `i` of `m`; `client`: a `Watch` of
//! everything), `m` replica processes of this binary (`shardwatch replica ...`) start at once.
//! Each watches, and reports when its store is synced: how long its list took and how many
//! objects it holds. Once all are synced, this program makes `--changes` (2,000) merge patches
//! to ConfigMaps drawn evenly, waits for the events to arrive (1 s after the last replica's
//! count stops moving), and each replica reports the watch events it received after its list
//! and its peak RSS (`VmHWM`). One JSON line per run (appended to `--out FILE`), then a table.
//!
//! usage: `shardwatch [--configmaps N] [--namespaces K] [--replicas 1,2,3,4] [--fields uid,namespace]
//! [--changes C] [--out FILE]`

use std::path::Path;
use std::time::{Duration, Instant};

use benches::replicas::{
    ReplicaProcess, ResultLines, client_from, create_config_maps, proc_status_kib,
};
use ctrlq_controller::kube::Watch;
use ctrlq_controller::shard::{ShardField, ShardSelector};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

const GATE: &str = "--feature-gates=ShardedListAndWatch=true";

struct Args {
    configmaps: usize,
    namespaces: usize,
    replicas: Vec<u32>,
    fields: Vec<String>,
    changes: usize,
    out: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Args {
    let mut a = Args {
        configmaps: 20_000,
        namespaces: 50,
        replicas: vec![1, 2, 3, 4],
        fields: vec!["uid".into(), "namespace".into()],
        changes: 2_000,
        out: None,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--configmaps" => a.configmaps = value.parse().expect("--configmaps N"),
            "--namespaces" => a.namespaces = value.parse().expect("--namespaces K"),
            "--replicas" => {
                a.replicas = value
                    .split(',')
                    .map(|m| m.parse().expect("1,2,3"))
                    .collect();
            }
            "--fields" => a.fields = value.split(',').map(str::to_owned).collect(),
            "--changes" => a.changes = value.parse().expect("--changes C"),
            "--out" => a.out = Some(value),
            _ => panic!("unknown flag {flag}; see the header of benches/src/bin/shardwatch.rs"),
        }
    }
    assert!(a.namespaces > 0 && a.replicas.iter().all(|m| *m > 0));
    a
}

fn field(name: &str) -> ShardField {
    match name {
        "uid" => ShardField::Uid,
        "namespace" => ShardField::Namespace,
        _ => panic!("--fields takes uid and namespace"),
    }
}

fn namespace_of(i: usize, namespaces: usize) -> String {
    format!("bench-{:02}", i % namespaces)
}

async fn create(client: &kube::Client, a: &Args) {
    let namespaces = (0..a.namespaces).map(|k| namespace_of(k, a.namespaces));
    create_config_maps(client, namespaces, a.configmaps, |i| {
        namespace_of(i, a.namespaces)
    })
    .await;
}

/// The peak resident set of this process, in KiB.
fn peak_rss_kib() -> u64 {
    proc_status_kib("VmHWM:")
}

/// `shardwatch replica KUBECONFIG MODE FIELD SHARD OF`: one replica's watch; prints a line when
/// synced, then the number of events it has received after its list every 100 ms, and its
/// report when its stdin closes.
async fn replica(mut args: impl Iterator<Item = String>) {
    let mut next = || args.next().expect("replica KUBECONFIG MODE FIELD SHARD OF");
    let (kubeconfig, mode, field_name) = (next(), next(), next());
    let shard: u32 = next().parse().expect("SHARD");
    let of: u32 = next().parse().expect("OF");
    let client = client_from(Path::new(&kubeconfig)).await;
    let started = Instant::now();
    let watch = if mode == "server" {
        let selector = ShardSelector::for_shards(field(&field_name), [shard], of).expect("a shard");
        Watch::<ConfigMap>::sharded(client, watcher::Config::default(), selector)
    } else {
        Watch::new(Api::<ConfigMap>::all(client), watcher::Config::default())
    };
    let events = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut keys = (watch.keys())();
    watch
        .synced(Duration::from_secs(600))
        .await
        .expect("synced");
    let list_ms = started.elapsed().as_secs_f64() * 1e3;
    let objects = watch.store().state().len();
    let counter = events.clone();
    tokio::spawn(async move {
        use ctrlq_controller::priority::NORMAL;
        while let Some(Ok(key)) = keys.next().await {
            // The listed keys come at LOW; live events at NORMAL.
            if key.priority == NORMAL {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    println!(
        "{}",
        json!({"synced": true, "list_ms": list_ms, "objects": objects})
    );
    // The count every 100 ms for the parent, until it closes stdin.
    let mut stdin = tokio::task::spawn_blocking(|| std::io::stdin().lines().count());
    loop {
        tokio::select! {
            _ = &mut stdin => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                println!("{}", json!({"events": events.load(std::sync::atomic::Ordering::Relaxed)}));
            }
        }
    }
    println!(
        "{}",
        json!({
            "report": true,
            "events": events.load(std::sync::atomic::Ordering::Relaxed),
            "objects": watch.store().state().len(),
            "list_ms": list_ms,
            "peak_rss_kib": peak_rss_kib(),
        })
    );
}

type Replica = ReplicaProcess;

fn spawn(kubeconfig: &Path, mode: &str, field: &str, shard: u32, of: u32) -> Replica {
    let kubeconfig = kubeconfig.display().to_string();
    let (shard, of) = (shard.to_string(), of.to_string());
    ReplicaProcess::spawn(["replica", &kubeconfig, mode, field, &shard, &of])
}

async fn run(
    a: &Args,
    kubeconfig: &Path,
    client: &kube::Client,
    m: u32,
    field: &str,
    mode: &str,
) -> Value {
    let mut replicas: Vec<Replica> = (0..m)
        .map(|i| spawn(kubeconfig, mode, field, i, m))
        .collect();
    for r in &replicas {
        r.next_with("synced", Duration::from_secs(600));
    }
    // The changes: `--changes` merge patches over ConfigMaps drawn evenly.
    // A value no earlier run wrote: a merge patch that changes nothing makes no event.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos();
    futures::stream::iter(0..a.changes)
        .map(|c| {
            let i = c * a.configmaps / a.changes.max(1);
            let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace_of(i, a.namespaces));
            let patch = json!({"data": {"value": format!("{stamp}-{c}")}});
            async move {
                api.patch(
                    &format!("cm-{i:06}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .expect("a patch");
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    // Until every replica's count has not moved for a second.
    let mut last = vec![u64::MAX; replicas.len()];
    let mut still = Instant::now();
    while still.elapsed() < Duration::from_secs(1) {
        for (k, r) in replicas.iter().enumerate() {
            let n = r.next_with("events", Duration::from_secs(30))["events"]
                .as_u64()
                .unwrap_or(0);
            if n != last[k] {
                last[k] = n;
                still = Instant::now();
            }
        }
    }
    let mut reports = Vec::new();
    for r in &mut replicas {
        drop(r.stdin.take());
        reports.push(r.next_with("report", Duration::from_secs(30)));
        let _ = r.child.wait();
    }
    json!({
        "replicas": m, "field": field, "mode": mode,
        "configmaps": a.configmaps, "namespaces": a.namespaces, "changes": a.changes,
        "per_replica": reports,
    })
}

fn table(lines: &[Value]) -> String {
    let mut out = String::from(
        "replicas  field      mode    objects held (max / sum)   events (max / sum)   list s (max)   peak RSS MiB (max)\n",
    );
    for l in lines {
        let per = l["per_replica"].as_array().cloned().unwrap_or_default();
        let col = |k: &str| {
            per.iter()
                .map(|r| r[k].as_f64().unwrap_or(0.0))
                .collect::<Vec<_>>()
        };
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (objects, events, list, rss) = (
            col("objects"),
            col("events"),
            col("list_ms"),
            col("peak_rss_kib"),
        );
        out += &format!(
            "{:<9} {:<10} {:<7} {:>10.0} / {:<13.0} {:>8.0} / {:<9.0} {:>12.2} {:>18.1}\n",
            l["replicas"],
            l["field"].as_str().unwrap_or(""),
            l["mode"].as_str().unwrap_or(""),
            max(&objects),
            objects.iter().sum::<f64>(),
            max(&events),
            events.iter().sum::<f64>(),
            max(&list) / 1e3,
            max(&rss) / 1024.0,
        );
    }
    out
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("replica") {
        args.next();
        replica(args).await;
        return;
    }
    let a = parse_args(args);
    let plane = ctrlq_envtest::ControlPlane::start_with([GATE]).await;
    let client = plane.client(ctrlq_envtest::ADMIN);
    let created = Instant::now();
    create(&client, &a).await;
    eprintln!(
        "shardwatch: {} ConfigMaps in {} namespaces in {:.1} s",
        a.configmaps,
        a.namespaces,
        created.elapsed().as_secs_f64()
    );
    let mut lines = ResultLines::new(a.out.as_deref());
    for &m in &a.replicas {
        for field in &a.fields {
            for mode in ["server", "client"] {
                if mode == "client" && field != &a.fields[0] {
                    continue; // client-side filtering holds the same whatever the field
                }
                let line = run(&a, &plane.kubeconfig_file(), &client, m, field, mode).await;
                lines.push(line);
            }
        }
    }
    print!("{}", table(&lines.lines));
}
