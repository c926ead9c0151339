//! A sharded controller's replicas as processes on a real kube-apiserver (`WORKLOADS.md`,
//! "shardrun"): each replica's sources on `Watch::for_shards` (mode `server`: one watcher per
//! held shard, the API server filtering by namespace shard selector) or on one `Watch` of
//! everything (mode `client`: every replica lists and holds every object, its runner drops the
//! other shards' keys), the shard and member records Leases on the same server. Per replica:
//! objects held, watch events received, peak RSS; per fleet: the time until every object was
//! reconciled from the start, the reconcile latency of live changes made at a fixed rate, and
//! the take-over after a replica is killed (SIGKILL): from the kill, and from the survivor's
//! win of each shard, until every object of the dead replica's shards was reconciled.
//!
//! One control plane started here (`--gate on`: kube-apiserver's `ShardedListAndWatch` on;
//! `off`: without it, the replicas' watchers receiving everything); `--configmaps N` (20,000)
//! ConfigMaps over `--namespaces K` (50) namespaces named `00-bench` … (`--names spread`) or
//! `bench-00` … (`--names suffix`, which FNV-1a puts in one shard), created once. For each `m`
//! of `--replicas` (1,2,3,4) and each mode of `--modes` (server,client), `m` replica processes
//! of this binary start at once, `--shards` (12) shards, Kubernetes' default election timing
//! (15 s lease, 10 s renew deadline, 2 s retry period), 4 workers, each reconcile awaiting
//! `--reconcile-ms` (5) as an API call would. One JSON line per run (appended to `--out FILE`),
//! then a table.
//!
//! The changes: `--rate` (100; a list runs each) merge patches a second for `--seconds` (10),
//! over the ConfigMaps evenly, each stamped with its send time, which the reconcile that first
//! reads it subtracts from its own start. The take-over (`--kill on`, for 2 replicas or more):
//! the first replica is killed after the changes.
//!
//! usage: `shardrun [--configmaps N] [--namespaces K] [--names spread|suffix] [--replicas 1,2,3,4]
//! [--modes server,client] [--shards S] [--rate R,R] [--seconds D] [--reconcile-ms T]
//! [--kill on|off] [--gate on|off] [--out FILE]`

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use benches::replicas::{
    ReplicaProcess, ResultLines, client_from, create_config_maps, proc_status_kib,
};
use ctrlq_controller::kube::{Object, Watch};
use ctrlq_controller::priority::NORMAL;
use ctrlq_controller::shard::{Sharding, field_hash, shard_of_hash};
use ctrlq_controller::{Action, Context, Controller, Event};
use ctrlq_leader::{LeaderElectionConfig, LeaseLock};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const GATE: &str = "--feature-gates=ShardedListAndWatch=true";
/// The namespace of the shard and member Leases.
const LEASES: &str = "shardrun";

struct Args {
    configmaps: usize,
    namespaces: usize,
    suffix_names: bool,
    replicas: Vec<u32>,
    modes: Vec<String>,
    shards: u32,
    rates: Vec<u64>,
    seconds: u64,
    kill: bool,
    reconcile_ms: u64,
    gate: bool,
    out: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Args {
    let mut a = Args {
        configmaps: 20_000,
        namespaces: 50,
        suffix_names: false,
        replicas: vec![1, 2, 3, 4],
        modes: vec!["server".into(), "client".into()],
        shards: 12,
        rates: vec![100],
        seconds: 10,
        kill: true,
        reconcile_ms: 5,
        gate: true,
        out: None,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--configmaps" => a.configmaps = value.parse().expect("--configmaps N"),
            "--namespaces" => a.namespaces = value.parse().expect("--namespaces K"),
            "--names" => a.suffix_names = value == "suffix",
            "--replicas" => {
                a.replicas = value
                    .split(',')
                    .map(|m| m.parse().expect("1,2,3"))
                    .collect();
            }
            "--modes" => a.modes = value.split(',').map(str::to_owned).collect(),
            "--shards" => a.shards = value.parse().expect("--shards S"),
            "--rate" => {
                a.rates = value
                    .split(',')
                    .map(|r| r.parse().expect("--rate R,R"))
                    .collect();
            }
            "--kill" => a.kill = value == "on",
            "--seconds" => a.seconds = value.parse().expect("--seconds D"),
            "--reconcile-ms" => a.reconcile_ms = value.parse().expect("--reconcile-ms T"),
            "--gate" => a.gate = value == "on",
            "--out" => a.out = Some(value),
            _ => panic!("unknown flag {flag}; see the header of benches/src/bin/shardrun.rs"),
        }
    }
    assert!(a.namespaces > 0 && a.shards > 0 && a.replicas.iter().all(|m| *m > 0));
    a
}

impl Args {
    fn namespace(&self, i: usize) -> String {
        let k = i % self.namespaces;
        if self.suffix_names {
            format!("bench-{k:02}")
        } else {
            format!("{k:02}-bench")
        }
    }

    fn shard_of(&self, namespace: &str) -> u32 {
        shard_of_hash(field_hash(namespace), self.shards)
    }

    /// The objects in each shard.
    fn per_shard(&self) -> BTreeMap<u32, usize> {
        let mut per = BTreeMap::new();
        for i in 0..self.configmaps {
            *per.entry(self.shard_of(&self.namespace(i))).or_default() += 1;
        }
        per
    }
}

fn unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}

async fn create(client: &kube::Client, a: &Args) {
    let mut namespaces: Vec<String> = (0..a.namespaces).map(|i| a.namespace(i)).collect();
    namespaces.push(LEASES.to_owned());
    create_config_maps(client, namespaces, a.configmaps, |i| a.namespace(i)).await;
}

/// The peak resident set of this process, in KiB.
fn peak_rss_kib() -> u64 {
    proc_status_kib("VmHWM:")
}

/// What one replica's reconciles and events record.
#[derive(Default)]
struct Tally {
    /// Per held shard: when its term began (unix ms) and the keys reconciled since.
    terms: HashMap<u32, (u64, HashSet<String>)>,
    /// The shards whose every object was reconciled in their current term.
    done: HashSet<u32>,
    /// Latencies (ms) of live changes, from the patch's stamp to the start of the first
    /// reconcile that read it.
    latencies: Vec<u64>,
    /// The stamps read so far, by key: a later reconcile of the same stamp is no change.
    stamps: HashMap<String, u64>,
    reconciles: u64,
}

/// `shardrun replica KUBECONFIG MODE NAME ID SHARDS RECONCILE_MS EXPECTED`: one replica; prints
/// its status every 200 ms, a line when a shard's objects are all reconciled in its term, and
/// its report when its stdin closes.
async fn replica(mut args: impl Iterator<Item = String>) {
    let mut next = || {
        args.next()
            .expect("replica KUBECONFIG MODE NAME ID SHARDS RECONCILE_MS EXPECTED")
    };
    let (kubeconfig, mode, name, id) = (next(), next(), next(), next());
    let shards: u32 = next().parse().expect("SHARDS");
    let reconcile_ms: u64 = next().parse().expect("RECONCILE_MS");
    // `shard:count,…`: the objects each shard holds.
    let expected: HashMap<u32, usize> = next()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (shard, count) = s.split_once(':').expect("shard:count");
            (
                shard.parse().expect("a shard"),
                count.parse().expect("a count"),
            )
        })
        .collect();
    let started = unix_ms();
    let client = client_from(Path::new(&kubeconfig)).await;
    let leases = client.clone();
    let me = id.clone();
    let sharding = Sharding::new(
        shards,
        id.clone(),
        move |record: &str| LeaseLock::new(leases.clone(), LEASES, record, me.clone()),
        LeaderElectionConfig::default(),
    )
    .expect("a sharding")
    .by_namespace();
    let held = sharding.subscribe_held();
    let watch = if mode == "server" {
        Watch::<ConfigMap>::for_shards(client, watcher::Config::default(), &sharding)
            .expect("sharded by namespace")
    } else {
        Watch::new(Api::<ConfigMap>::all(client), watcher::Config::default())
    };
    // The watch events received: the live keys (listed ones come at LOW).
    let events = Arc::new(AtomicU64::new(0));
    let mut keys = (watch.keys())();
    let counter = events.clone();
    tokio::spawn(async move {
        while let Some(Ok(key)) = keys.next().await {
            if key.priority == NORMAL {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let tally = Arc::new(Mutex::new(Tally::default()));
    let (t, on_event_tally) = (tally.clone(), tally.clone());
    let reader = watch.clone();
    let controller = Controller::for_watch(
        name,
        &watch,
        move |key: ObjectRef<ConfigMap>, cm: Object<ConfigMap>, _ctx: Context| {
            let namespace = key.namespace.clone().unwrap_or_default();
            let shard = shard_of_hash(field_hash(&namespace), shards);
            let value = cm
                .present()
                .and_then(|cm| cm.data.as_ref()?.get("value").cloned());
            {
                let mut t = t.lock().unwrap();
                t.reconciles += 1;
                let t = &mut *t;
                // Changes made while this replica runs, each counted at its first reconcile.
                let key_name = format!("{namespace}/{}", key.name);
                if let Some(stamp) = value.and_then(|v| v.strip_prefix('t')?.parse::<u64>().ok())
                    && stamp >= started
                    && t.stamps.insert(key_name, stamp) != Some(stamp)
                {
                    t.latencies.push(unix_ms().saturating_sub(stamp));
                }
                // The bench's objects only, not the API server's own ConfigMaps.
                let ours = namespace.ends_with("bench") || namespace.starts_with("bench");
                if let Some((_, seen)) = t.terms.get_mut(&shard).filter(|_| ours) {
                    seen.insert(format!("{namespace}/{}", key.name));
                    let want = expected.get(&shard).copied().unwrap_or(0);
                    if seen.len() >= want && t.done.insert(shard) {
                        let began = t.terms[&shard].0;
                        let now = unix_ms();
                        println!(
                            "{}",
                            json!({"shard_done": shard, "at_unix_ms": now, "after_gain_ms": now - began})
                        );
                    }
                }
            }
            async move {
                tokio::time::sleep(Duration::from_millis(reconcile_ms)).await;
                Ok::<_, kube::Error>(Action::Done)
            }
        },
    )
    .workers(4)
    .on_event(move |e| match e {
        Event::ShardLeading { shard, .. } => {
            let mut t = on_event_tally.lock().unwrap();
            t.terms.insert(*shard, (unix_ms(), HashSet::new()));
            t.done.remove(shard);
        }
        Event::ShardEnded { shard, .. } => {
            let mut t = on_event_tally.lock().unwrap();
            t.terms.remove(shard);
            t.done.remove(shard);
        }
        _ => {}
    })
    .sharded(sharding);
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    let status = |report: bool| {
        let t = tally.lock().unwrap();
        let held: Vec<u32> = held.borrow().iter().copied().collect();
        let mut line = json!({
            "held": held,
            "objects": reader.store().len(),
            "events": events.load(Ordering::Relaxed),
            "reconciles": t.reconciles,
            "peak_rss_kib": peak_rss_kib(),
            "rss_kib": proc_status_kib("VmRSS:"),
        });
        if report {
            line["report"] = json!(true);
        } else {
            line["status"] = json!(true);
        }
        line
    };
    // Each line on stdin asks for the latencies so far; its end, for the report.
    let (asks, mut asked) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if line.is_err() || asks.send(()).is_err() {
                return;
            }
        }
    });
    loop {
        tokio::select! {
            ask = asked.recv() => match ask {
                Some(()) => {
                    let latencies = tally.lock().unwrap().latencies.clone();
                    println!("{}", json!({"latencies": latencies}));
                }
                None => break,
            },
            () = tokio::time::sleep(Duration::from_millis(200)) => println!("{}", status(false)),
        }
    }
    println!("{}", status(true));
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), run).await;
}

struct Replica {
    process: ReplicaProcess,
    /// Its last status line.
    last: Value,
}

fn spawn(kubeconfig: &Path, mode: &str, name: &str, id: &str, a: &Args) -> Replica {
    let expected: Vec<String> = a
        .per_shard()
        .iter()
        .map(|(s, n)| format!("{s}:{n}"))
        .collect();
    let kubeconfig = kubeconfig.display().to_string();
    let (shards, reconcile_ms) = (a.shards.to_string(), a.reconcile_ms.to_string());
    let args = [
        "replica",
        &kubeconfig,
        mode,
        name,
        id,
        &shards,
        &reconcile_ms,
        &expected.join(","),
    ];
    Replica {
        process: ReplicaProcess::spawn(args),
        last: json!({}),
    }
}

/// Reads the lines every replica has ready (keeping each one's last status), the `shard_done`
/// lines among them returned as (replica, shard, at unix ms, after gain ms).
fn drain_lines(replicas: &mut [Replica]) -> Vec<(usize, u32, u64, u64)> {
    let mut done = Vec::new();
    for (k, r) in replicas.iter_mut().enumerate() {
        while let Ok(v) = r.process.lines.try_recv() {
            if let Some(shard) = v["shard_done"].as_u64() {
                let shard = u32::try_from(shard).expect("a shard");
                let at = v["at_unix_ms"].as_u64().unwrap_or(0);
                let after = v["after_gain_ms"].as_u64().unwrap_or(0);
                done.push((k, shard, at, after));
            } else if v.get("status").is_some() {
                r.last = v;
            }
        }
    }
    done
}

fn held_of(r: &Replica) -> BTreeSet<u32> {
    r.last["held"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter_map(|s| s.as_u64())
                .map(|s| s as u32)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (polling every 100 ms, at most `limit`) until `until` holds of the replicas' lines,
/// collecting the `shard_done` lines; returns them.
fn wait(
    replicas: &mut [Replica],
    limit: Duration,
    what: &str,
    mut until: impl FnMut(&[Replica], &[(usize, u32, u64, u64)]) -> bool,
) -> Vec<(usize, u32, u64, u64)> {
    let start = Instant::now();
    let mut done = Vec::new();
    loop {
        done.extend(drain_lines(replicas));
        if until(replicas, &done) {
            return done;
        }
        assert!(
            start.elapsed() < limit,
            "shardrun: {what} not within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn run(
    a: &Args,
    kubeconfig: &Path,
    client: &kube::Client,
    (m, mode, rate): (u32, &str, u64),
) -> Value {
    let name = format!("run-{m}-{mode}-{}", unix_ms() % 100_000);
    let start = unix_ms();
    let mut replicas: Vec<Replica> = (0..m)
        .map(|i| spawn(kubeconfig, mode, &name, &format!("r{i}"), a))
        .collect();
    let every_shard: BTreeSet<u32> = a.per_shard().into_keys().collect();
    let all_shards = a.shards as usize;
    // Every shard held by one replica, each replica with its share, and every object
    // reconciled in its shard's term: settled.
    let settled = |rs: &[Replica], done: &[(usize, u32, u64, u64)]| {
        let held: Vec<BTreeSet<u32>> = rs.iter().map(held_of).collect();
        let count: usize = held.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<u32> = held.iter().flatten().copied().collect();
        let fair = held.iter().all(|h| h.len() >= all_shards / rs.len());
        // A shard is done when its current holder reported it done in this term.
        let done_now: BTreeSet<u32> = done
            .iter()
            .filter(|(k, s, ..)| held[*k].contains(s))
            .map(|(_, s, ..)| *s)
            .collect();
        count == all_shards && union.len() == all_shards && fair && every_shard.is_subset(&done_now)
    };
    let done = wait(
        &mut replicas,
        Duration::from_secs(600),
        "the first fill",
        settled,
    );
    let fill_ms = done.iter().map(|d| d.2).max().unwrap_or(start) - start;
    // The status lines after the fill: what each replica holds and received.
    std::thread::sleep(Duration::from_secs(1));
    drain_lines(&mut replicas);
    let settled_status: Vec<Value> = replicas.iter().map(|r| r.last.clone()).collect();
    let events_before: Vec<u64> = settled_status
        .iter()
        .map(|s| s["events"].as_u64().unwrap_or(0))
        .collect();

    // Live changes at `--rate` a second for `--seconds`, each stamped with its send time.
    let changes = rate * a.seconds;
    let began = Instant::now();
    futures::stream::iter(0..changes)
        .map(|c| {
            // A prime stride: every object in turn, every namespace alike.
            let i = usize::try_from(c).expect("an index") * 7919 % a.configmaps;
            let api = Api::<ConfigMap>::namespaced(client.clone(), &a.namespace(i));
            let due = began + Duration::from_micros(c * 1_000_000 / rate.max(1));
            async move {
                tokio::time::sleep_until(due.into()).await;
                let patch = json!({"data": {"value": format!("t{}", unix_ms())}});
                api.patch(
                    &format!("cm-{i:06}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .expect("a patch");
            }
        })
        .buffer_unordered(64)
        .collect::<()>()
        .await;
    let sent_ms = began.elapsed().as_millis();
    std::thread::sleep(Duration::from_secs(3));
    drain_lines(&mut replicas);
    let change_events: Vec<u64> = replicas
        .iter()
        .zip(&events_before)
        .map(|(r, before)| r.last["events"].as_u64().unwrap_or(0) - before)
        .collect();
    let after_changes: Vec<Value> = replicas.iter().map(|r| r.last.clone()).collect();
    // The changes' latencies, asked before the take-over, whose reconciles are no changes.
    let mut latencies: Vec<u64> = Vec::new();
    for r in &mut replicas {
        let stdin = r.process.stdin.as_mut().expect("its stdin");
        writeln!(stdin, "latencies").expect("ask a replica");
        stdin.flush().expect("ask a replica");
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let v = r
                .process
                .lines
                .recv_timeout(left)
                .expect("a replica's latencies");
            if let Some(l) = v["latencies"].as_array() {
                latencies.extend(l.iter().filter_map(Value::as_u64));
                break;
            }
            if v.get("status").is_some() {
                r.last = v;
            }
        }
    }
    latencies.sort_unstable();

    // Take-over: the first replica killed; the others take its shards and reconcile every
    // object in them.
    let mut takeover = json!(null);
    if m >= 2 && a.kill {
        let dead = held_of(&replicas[0]);
        let killed = unix_ms();
        replicas[0].process.child.kill().expect("kill a replica");
        let _ = replicas[0].process.child.wait();
        let done = wait(
            &mut replicas[1..],
            Duration::from_secs(300),
            "the take-over",
            |_, done| {
                dead.iter()
                    .all(|s| done.iter().any(|d| d.1 == *s && d.2 >= killed))
            },
        );
        let of_dead: Vec<&(usize, u32, u64, u64)> = done
            .iter()
            .filter(|d| dead.contains(&d.1) && d.2 >= killed)
            .collect();
        let all_ms = of_dead.iter().map(|d| d.2).max().unwrap_or(killed) - killed;
        let listing_ms = of_dead.iter().map(|d| d.3).max().unwrap_or(0);
        let objects: usize = dead
            .iter()
            .map(|s| a.per_shard().get(s).copied().unwrap_or(0))
            .sum();
        takeover = json!({"shards": dead, "objects": objects, "from_kill_ms": all_ms, "from_gain_ms": listing_ms});
    }
    let mut reports = Vec::new();
    for r in &mut replicas {
        if let Some(stdin) = r.process.stdin.take() {
            drop(stdin);
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                let left = until.saturating_duration_since(Instant::now());
                match r.process.lines.recv_timeout(left) {
                    Ok(v) if v.get("report").is_some() => {
                        reports.push(v);
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
        let _ = r.process.child.wait();
    }
    let per_replica: Vec<Value> = settled_status
        .iter()
        .zip(&change_events)
        .zip(&after_changes)
        .map(|((s, events), after)| {
            json!({"held": s["held"], "objects": s["objects"], "change_events": events, "peak_rss_kib": after["peak_rss_kib"], "rss_kib": after["rss_kib"]})
        })
        .collect();
    json!({
        "replicas": m, "mode": mode, "gate": a.gate, "shards": a.shards,
        "configmaps": a.configmaps, "namespaces": a.namespaces,
        "names": if a.suffix_names { "suffix" } else { "spread" },
        "reconcile_ms": a.reconcile_ms, "rate": rate, "seconds": a.seconds,
        "fill_ms": fill_ms,
        "changes": changes, "changes_sent_ms": sent_ms, "changes_reconciled": latencies.len(),
        "latency_ms": {"p50": percentile(&latencies, 0.5), "p99": percentile(&latencies, 0.99), "max": latencies.last().copied().unwrap_or(0)},
        "per_replica": per_replica,
        "survivor_reports": reports.iter().map(|r| json!({"objects": r["objects"], "events": r["events"], "peak_rss_kib": r["peak_rss_kib"]})).collect::<Vec<_>>(),
        "takeover": takeover,
    })
}

fn table(lines: &[Value]) -> String {
    let mut out = String::from(
        "replicas mode    rate/s objects held (max / sum)  events (max / sum)  RSS MiB now / peak (max)  fill s  change p50 / p99 ms  take-over s (kill / gain)\n",
    );
    for l in lines {
        let per = l["per_replica"].as_array().cloned().unwrap_or_default();
        let col = |k: &str| per.iter().filter_map(|r| r[k].as_f64()).collect::<Vec<_>>();
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (objects, peak, events) = (col("objects"), col("peak_rss_kib"), col("change_events"));
        let now = col("rss_kib");
        let t = &l["takeover"];
        let takeover = if t.is_null() {
            "-".to_owned()
        } else {
            format!(
                "{:.1} / {:.1}",
                t["from_kill_ms"].as_f64().unwrap_or(0.0) / 1e3,
                t["from_gain_ms"].as_f64().unwrap_or(0.0) / 1e3
            )
        };
        out += &format!(
            "{:<8} {:<7} {:<6} {:>9.0} / {:<13.0} {:>7.0} / {:<9.0} {:>10.1} / {:<12.1} {:>7.1} {:>9} / {:<9} {}\n",
            l["replicas"],
            l["mode"].as_str().unwrap_or(""),
            l["rate"],
            max(&objects),
            objects.iter().sum::<f64>(),
            max(&events),
            events.iter().sum::<f64>(),
            max(&now) / 1024.0,
            max(&peak) / 1024.0,
            l["fill_ms"].as_f64().unwrap_or(0.0) / 1e3,
            l["latency_ms"]["p50"],
            l["latency_ms"]["p99"],
            takeover,
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
    let plane = if a.gate {
        ctrlq_envtest::ControlPlane::start_with([GATE]).await
    } else {
        ctrlq_envtest::ControlPlane::start().await
    };
    let client = plane.client(ctrlq_envtest::ADMIN);
    let created = Instant::now();
    create(&client, &a).await;
    let per_shard = a.per_shard();
    eprintln!(
        "shardrun: {} ConfigMaps in {} namespaces in {:.1} s; objects per shard {per_shard:?}",
        a.configmaps,
        a.namespaces,
        created.elapsed().as_secs_f64()
    );
    let mut lines = ResultLines::new(a.out.as_deref());
    for &m in &a.replicas {
        for mode in &a.modes {
            for &rate in &a.rates {
                let line = run(&a, &plane.kubeconfig_file(), &client, (m, mode, rate)).await;
                lines.push(line);
            }
        }
    }
    print!("{}", table(&lines.lines));
}
