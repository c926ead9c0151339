//! Live changes first, on a real kube-apiserver (`WORKLOADS.md`, "livefirst"): how long a live
//! change waits while a controller's initial list drains, and how long the initial keys wait
//! under steady live traffic, for ctrlq's runner, kube-runtime's `Controller` and
//! controller-runtime's (the Go program `benches/peer/livefirst`), side by side on one
//! control plane.
//!
//! One control plane (started here from the binaries `scripts/install-controlplane` builds, or
//! the cluster of `--kubeconfig`), `--configmaps N` ConfigMaps `cm-000000`… in one namespace,
//! created once. Then `--rounds R` rounds (5); each round runs every side of `--side` once, the
//! order rotating from round to round. A run starts the side's controller as a process of its
//! own (this binary's `controller` mode for `ctrlq` and `kube-runtime`, the Go program for
//! `controller-runtime`): `--workers` workers (4), a reconcile that reads the ConfigMap from
//! the controller's store or cache, notes the instant, its name and its `live` data field on a
//! line of its standard output, awaits `--reconcile-ms` (1) and writes nothing; every other
//! option at its default. `--delay-ms` (1000) after the process started, this program changes
//! ConfigMaps (a merge patch of `data.live` to a counter that grows across runs), rotating
//! among `--live-keys` keys spread evenly over the names:
//!
//! - the list scenario (default): `--changes` changes (50), one every `--interval-ms` (100);
//! - `--steady`: one every `--interval-ms` (10) for `--duration` seconds (60).
//!
//! Per change, the live latency is the time from the API server's answer to the patch to the
//! start of the first reconcile of that key that saw the new value or a later one (0 when a
//! reconcile saw it before the answer reached us). A run ends when every initial key has been
//! reconciled and every change seen, within `--timeout` seconds (300) of its start, else it
//! fails loudly. Each run prints one JSON line (and appends it to `--out FILE`); with more than
//! one run, a table follows: per scenario and side the medians over rounds, and the ratio of
//! each median to ctrlq's. `--table FILE` prints the table of the lines in FILE, running nothing.
//!
//! usage: `livefirst [--side ctrlq|kube-runtime|controller-runtime|all] [--rounds R]
//! [--configmaps N] [--steady] [--changes C] [--duration S] [--interval-ms MS] [--live-keys K]
//! [--delay-ms MS] [--workers W] [--reconcile-ms MS] [--timeout S] [--kubeconfig FILE]
//! [--namespace NS] [--go-bin PATH] [--out FILE] [--table FILE]`
//!
//! The Go side is built by `go build -o ~/.cache/ctrlq/peer/bin/livefirst ./livefirst` in
//! `benches/peer` (`benches/livefirst` does it and runs this binary).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

const SIDES: [&str; 3] = ["ctrlq", "kube-runtime", "controller-runtime"];

/// Nanoseconds since the Unix epoch: the clock both processes of a run share.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos() as u64
}

fn name_of(i: usize) -> String {
    format!("cm-{i:06}")
}

/// The index of a name this program created.
fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix("cm-")?.parse().ok()
}

struct Args {
    side: String,
    rounds: usize,
    configmaps: usize,
    steady: bool,
    changes: usize,
    duration_s: f64,
    interval_ms: Option<u64>,
    live_keys: usize,
    delay_ms: u64,
    workers: usize,
    reconcile_ms: u64,
    timeout_s: u64,
    kubeconfig: Option<PathBuf>,
    namespace: String,
    go_bin: PathBuf,
    out: Option<PathBuf>,
    table: Option<PathBuf>,
}

const USAGE: &str = "usage: livefirst [--side ctrlq|kube-runtime|controller-runtime|all] \
    [--rounds R] [--configmaps N] [--steady] [--changes C] [--duration S] [--interval-ms MS] \
    [--live-keys K] [--delay-ms MS] [--workers W] [--reconcile-ms MS] [--timeout S] \
    [--kubeconfig FILE] [--namespace NS] [--go-bin PATH] [--out FILE] [--table FILE]\n\
    \x20      livefirst controller --side ctrlq|kube-runtime --kubeconfig FILE --namespace NS \
    [--workers W] [--reconcile-ms MS]";

fn usage(message: &str) -> ! {
    eprintln!("livefirst: {message}\n{USAGE}");
    std::process::exit(2);
}

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> T {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
}

fn parse_args(args: impl Iterator<Item = String>) -> Args {
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    let mut a = Args {
        side: "all".into(),
        rounds: 5,
        configmaps: 20_000,
        steady: false,
        changes: 50,
        duration_s: 60.0,
        interval_ms: None,
        live_keys: 10,
        delay_ms: 1000,
        workers: 4,
        reconcile_ms: 1,
        timeout_s: 300,
        kubeconfig: None,
        namespace: "livefirst".into(),
        go_bin: Path::new(&home).join(".cache/ctrlq/peer/bin/livefirst"),
        out: None,
        table: None,
    };
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--side" => a.side = parse(&flag, args.next()),
            "--rounds" => a.rounds = parse(&flag, args.next()),
            "--configmaps" => a.configmaps = parse(&flag, args.next()),
            "--steady" => a.steady = true,
            "--changes" => a.changes = parse(&flag, args.next()),
            "--duration" => a.duration_s = parse(&flag, args.next()),
            "--interval-ms" => a.interval_ms = Some(parse(&flag, args.next())),
            "--live-keys" => a.live_keys = parse(&flag, args.next()),
            "--delay-ms" => a.delay_ms = parse(&flag, args.next()),
            "--workers" => a.workers = parse(&flag, args.next()),
            "--reconcile-ms" => a.reconcile_ms = parse(&flag, args.next()),
            "--timeout" => a.timeout_s = parse(&flag, args.next()),
            "--kubeconfig" => a.kubeconfig = Some(parse(&flag, args.next())),
            "--namespace" => a.namespace = parse(&flag, args.next()),
            "--go-bin" => a.go_bin = parse(&flag, args.next()),
            "--out" => a.out = Some(parse(&flag, args.next())),
            "--table" => a.table = Some(parse(&flag, args.next())),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    if a.side != "all" && !SIDES.contains(&a.side.as_str()) {
        usage(&format!("unknown side {}", a.side));
    }
    if a.live_keys == 0 || a.live_keys > a.configmaps || a.workers == 0 || a.rounds == 0 {
        usage("--live-keys must be in 1..=--configmaps, --workers and --rounds at least 1");
    }
    a
}

async fn client_from(kubeconfig: &Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    kube::Client::try_from(config).expect("a kube client")
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The namespace and `n` ConfigMaps in it, 32 requests at a time; those that exist already
/// (a cluster of `--kubeconfig` used before) are kept.
async fn create_config_maps(client: &kube::Client, ns: &str, n: usize) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => panic!("namespace {ns}: {e}"),
    }
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name_of(i)),
                        ..Default::default()
                    },
                    data: Some([("value".to_owned(), i.to_string())].into()),
                    ..Default::default()
                };
                match api.create(&PostParams::default(), &cm).await {
                    Ok(_) => {}
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => panic!("ConfigMap {i}: {e}"),
                }
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
}

// ---------------------------------------------------------------------------------------------
// The controller process (`livefirst controller ...`): one Rust side, printing its reconciles.

/// Prints `<unix-nanos> <name> <live or ->` lines from a thread of its own, flushing whenever
/// none is waiting.
fn printer() -> std::sync::mpsc::Sender<(u64, String, Option<String>)> {
    let (tx, rx) = std::sync::mpsc::channel::<(u64, String, Option<String>)>();
    std::thread::spawn(move || {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
        while let Ok(mut rec) = rx.recv() {
            loop {
                let (at, name, value) = &rec;
                let value = value.as_deref().unwrap_or("-");
                if writeln!(out, "{at} {name} {value}").is_err() {
                    std::process::exit(1);
                }
                match rx.try_recv() {
                    Ok(next) => rec = next,
                    Err(_) => break,
                }
            }
            if out.flush().is_err() {
                std::process::exit(1);
            }
        }
    });
    tx
}

fn live_of(cm: &ConfigMap) -> Option<String> {
    cm.data.as_ref()?.get("live").cloned()
}

async fn controller_main(a: Args) {
    let kubeconfig = a
        .kubeconfig
        .clone()
        .unwrap_or_else(|| usage("controller needs --kubeconfig"));
    let api = Api::<ConfigMap>::namespaced(client_from(&kubeconfig).await, &a.namespace);
    let sleep = Duration::from_millis(a.reconcile_ms);
    let out = printer();
    match a.side.as_str() {
        "ctrlq" => {
            use ctrlq_controller::kube::Watch;
            use ctrlq_controller::{Action, Controller};
            let watch = Watch::new(api, watcher::Config::default());
            let reconcile = move |key: kube::runtime::reflector::ObjectRef<ConfigMap>,
                                  object: ctrlq_controller::kube::Object<ConfigMap>,
                                  _ctx| {
                let at = now_ns();
                let value = object.present().and_then(|cm| live_of(cm));
                let _ = out.send((at, key.name, value));
                async move {
                    tokio::time::sleep(sleep).await;
                    Ok::<_, std::convert::Infallible>(Action::Done)
                }
            };
            Controller::for_watch("livefirst", &watch, reconcile)
                .workers(a.workers)
                .run(tokio_util::sync::CancellationToken::new())
                .await;
        }
        "kube-runtime" => {
            use kube::runtime::controller::{Action, Config, Controller};
            let reconcile = move |cm: Arc<ConfigMap>, _ctx: Arc<()>| {
                let at = now_ns();
                let name = cm.metadata.name.clone().unwrap_or_default();
                let _ = out.send((at, name, live_of(&cm)));
                async move {
                    tokio::time::sleep(sleep).await;
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                }
            };
            let concurrency = u16::try_from(a.workers).expect("at most 65535 workers");
            Controller::new(api, watcher::Config::default())
                .with_config(Config::default().concurrency(concurrency))
                .run(reconcile, |_, _, _| Action::await_change(), Arc::new(()))
                .for_each(|_| async {})
                .await;
        }
        other => usage(&format!(
            "controller mode runs ctrlq or kube-runtime, not {other}"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The measuring process.

/// What the reader of a controller's output gathered.
#[derive(Default)]
struct Seen {
    /// Per initial key, the instant of its first reconcile (0: none yet).
    first: Vec<u64>,
    missing: usize,
    reconciles: u64,
    first_any: Option<u64>,
    /// Per live key, the reconciles that saw a `live` value: (instant, value).
    live: HashMap<usize, Vec<(u64, u64)>>,
}

/// A controller process, killed when dropped (a failed run leaves nothing behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_side(a: &Args, side: &str, kubeconfig: &Path, seen: &Arc<Mutex<Seen>>) -> Running {
    let mut command = if side == "controller-runtime" {
        assert!(
            a.go_bin.exists(),
            "{} is missing: build it with `go build -o {} ./livefirst` in benches/peer",
            a.go_bin.display(),
            a.go_bin.display()
        );
        let mut c = Command::new(&a.go_bin);
        c.env("KUBECONFIG", kubeconfig)
            .arg("-namespace")
            .arg(&a.namespace)
            .arg("-workers")
            .arg(a.workers.to_string())
            .arg("-reconcile")
            .arg(format!("{}ms", a.reconcile_ms));
        c
    } else {
        let mut c = Command::new(std::env::current_exe().expect("this binary's path"));
        c.arg("controller")
            .arg("--side")
            .arg(side)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--namespace")
            .arg(&a.namespace)
            .arg("--workers")
            .arg(a.workers.to_string())
            .arg("--reconcile-ms")
            .arg(a.reconcile_ms.to_string());
        c
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {side} controller: {e}"));
    let stdout = child.stdout.take().expect("a piped stdout");
    let seen = seen.clone();
    let live: Vec<usize> = live_keys(a);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split(' ');
            let (Some(at), Some(name), Some(value)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(at) = at.parse::<u64>() else { continue };
            let mut s = seen.lock().unwrap();
            s.reconciles += 1;
            s.first_any.get_or_insert(at);
            let Some(i) = index_of(name) else { continue };
            if i < s.first.len() && s.first[i] == 0 {
                s.first[i] = at;
                s.missing -= 1;
            }
            if let Ok(value) = value.parse::<u64>()
                && live.contains(&i)
            {
                s.live.entry(i).or_default().push((at, value));
            }
        }
    });
    Running(child)
}

/// The keys the changes rotate among: `--live-keys` of them, spread evenly over the names
/// (the last of each of as many equal stretches of the list).
fn live_keys(a: &Args) -> Vec<usize> {
    let stride = a.configmaps / a.live_keys;
    (1..=a.live_keys).map(|k| k * stride - 1).collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One run of one side: its JSON line.
async fn measure(
    a: &Args,
    side: &str,
    round: usize,
    kubeconfig: &Path,
    api: &Api<ConfigMap>,
) -> Value {
    let n = a.configmaps;
    let keys = live_keys(a);
    let interval = Duration::from_millis(a.interval_ms.unwrap_or(if a.steady { 10 } else { 100 }));
    let count = if a.steady {
        (a.duration_s * 1000.0 / interval.as_millis().max(1) as f64).round() as usize
    } else {
        a.changes
    };
    let timeout = Duration::from_secs(a.timeout_s);
    // Values above every earlier run's, so that a listed value never passes for a change.
    let base = now_ns() / 1000;
    let seen = Arc::new(Mutex::new(Seen {
        first: vec![0; n],
        missing: n,
        ..Seen::default()
    }));

    let start_ns = now_ns();
    let start = tokio::time::Instant::now();
    let running = spawn_side(a, side, kubeconfig, &seen);

    // The changes: one every `interval` from `delay`, each patch a task of its own so that a
    // slow answer does not shift the ones after it.
    let first_change = start + Duration::from_millis(a.delay_ms);
    let mut patches = Vec::with_capacity(count);
    for c in 0..count {
        tokio::time::sleep_until(first_change + interval * c as u32).await;
        assert!(
            start.elapsed() < timeout,
            "{side}: changes still under way {timeout:?} after the start"
        );
        let (api, key, value) = (api.clone(), keys[c % keys.len()], base + c as u64);
        patches.push(tokio::spawn(async move {
            let patch = json!({ "data": { "live": value.to_string() } });
            api.patch(
                &name_of(key),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("patching {}: {e}", name_of(key)));
            (key, value, now_ns())
        }));
    }
    let mut changes = Vec::with_capacity(count);
    for p in patches {
        changes.push(
            tokio::time::timeout(timeout, p)
                .await
                .expect("a patch within the timeout")
                .expect("a patch"),
        );
    }
    let traffic_end_ns = now_ns();
    let unreconciled_at_end = seen.lock().unwrap().missing;

    // Every initial key reconciled, every change seen.
    let mut last_value: HashMap<usize, u64> = HashMap::new();
    for &(key, value, _) in &changes {
        let v = last_value.entry(key).or_default();
        *v = (*v).max(value);
    }
    loop {
        let (missing, unseen) = {
            let s = seen.lock().unwrap();
            let unseen = last_value
                .iter()
                .filter(|(key, v)| {
                    !s.live
                        .get(key)
                        .is_some_and(|recs| recs.iter().any(|(_, seen)| seen >= v))
                })
                .count();
            (s.missing, unseen)
        };
        if missing == 0 && unseen == 0 {
            break;
        }
        assert!(
            start.elapsed() < timeout,
            "{side} round {round}: {missing} of {n} initial keys not reconciled and {unseen} live \
             keys' last change not seen {timeout:?} after the start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(running);

    let s = seen.lock().unwrap();
    let mut latencies: Vec<f64> = changes
        .iter()
        .map(|&(key, value, answered)| {
            let mut recs: Vec<&(u64, u64)> =
                s.live[&key].iter().filter(|(_, v)| *v >= value).collect();
            recs.sort();
            recs[0].0.saturating_sub(answered) as f64 / 1e6
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let last_first = s.first.iter().copied().max().unwrap_or(start_ns);
    let secs = |at: u64| round3(at.saturating_sub(start_ns) as f64 / 1e9);
    let mut line = json!({
        "workload": "livefirst",
        "scenario": if a.steady { "steady" } else { "list" },
        "side": side,
        "round": round,
        "configmaps": n,
        "workers": a.workers,
        "reconcile_ms": a.reconcile_ms,
        "changes": count,
        "interval_ms": interval.as_millis() as u64,
        "live_keys": keys.len(),
        "live_ms": {
            "p50": round3(percentile(&latencies, 50.0)),
            "p99": round3(percentile(&latencies, 99.0)),
            "max": round3(latencies.last().copied().unwrap_or(f64::NAN)),
        },
        "first_reconcile_s": secs(s.first_any.unwrap_or(start_ns)),
        "every_initial_key_s": secs(last_first),
        "reconciles": s.reconciles,
        "ok": true,
    });
    if a.steady {
        line["traffic_end_s"] = json!(secs(traffic_end_ns));
        line["unreconciled_at_end"] = json!(unreconciled_at_end);
    }
    line
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn figure(line: &Value, path: &[&str]) -> Option<f64> {
    let mut v = line;
    for p in path {
        v = v.get(p)?;
    }
    v.as_f64()
}

/// Per configuration (scenario, ConfigMaps, workers, reconcile time, changes, interval and live
/// keys) and side, the medians over rounds, and each median's ratio to ctrlq's.
fn table(lines: &[Value]) -> String {
    let columns: [(&str, &[&str]); 5] = [
        ("live p50 ms", &["live_ms", "p50"]),
        ("live p99 ms", &["live_ms", "p99"]),
        ("live max ms", &["live_ms", "max"]),
        ("every initial key s", &["every_initial_key_s"]),
        ("unreconciled at end", &["unreconciled_at_end"]),
    ];
    let mut groups: BTreeMap<(String, usize), Vec<&Value>> = BTreeMap::new();
    for l in lines {
        let config = [
            "configmaps",
            "workers",
            "reconcile_ms",
            "changes",
            "interval_ms",
            "live_keys",
        ]
        .map(|k| format!("{:>12}", l[k]))
        .join(" ");
        let scenario = format!("{} {config}", l["scenario"].as_str().unwrap_or("?"));
        let side = l["side"].as_str().unwrap_or("?");
        let order = SIDES.iter().position(|s| *s == side).unwrap_or(SIDES.len());
        groups.entry((scenario, order)).or_default().push(l);
    }
    let mut out = String::new();
    let mut scenario_done = String::new();
    let mut ours: HashMap<&str, f64> = HashMap::new();
    for ((scenario, order), rows) in &groups {
        if *scenario != scenario_done {
            let first = rows[0];
            out += &format!(
                "\n{}: {} ConfigMaps, {} workers, reconcile {} ms, {} changes every {} ms \
                 over {} keys; medians over rounds (x ctrlq: the median over ctrlq's)\n",
                first["scenario"].as_str().unwrap_or("?"),
                first["configmaps"],
                first["workers"],
                first["reconcile_ms"],
                first["changes"],
                first["interval_ms"],
                first["live_keys"]
            );
            out += &format!("{:<20}{:>7}", "side", "runs");
            for (name, _) in columns {
                out += &format!("{name:>22}");
            }
            out += "\n";
            scenario_done.clone_from(scenario);
            ours.clear();
        }
        let side = SIDES.get(*order).copied().unwrap_or("?");
        out += &format!("{side:<20}{:>7}", rows.len());
        for (name, path) in columns {
            let values: Vec<f64> = rows.iter().filter_map(|l| figure(l, path)).collect();
            if values.is_empty() {
                out += &format!("{:>22}", "-");
                continue;
            }
            let m = median(values);
            if side == "ctrlq" {
                ours.insert(name, m);
            }
            let ratio = match ours.get(name) {
                Some(o) if side != "ctrlq" && *o > 0.0 && m / o < 0.001 => " (<0.001x)".into(),
                Some(o) if side != "ctrlq" && *o > 0.0 => format!(" ({:.3}x)", m / o),
                _ => String::new(),
            };
            out += &format!("{:>22}", format!("{m:.1}{ratio}"));
        }
        out += "\n";
    }
    out
}

fn machine() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown processor".into())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("controller") {
        args.next();
        controller_main(parse_args(args)).await;
        return;
    }
    let a = parse_args(args);
    if let Some(path) = &a.table {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lines: Vec<Value> = text
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        print!("{}", table(&lines));
        return;
    }
    let plane;
    let (client, kubeconfig) = match &a.kubeconfig {
        Some(path) => (client_from(path).await, path.clone()),
        None => {
            plane = ctrlq_envtest::ControlPlane::start().await;
            (plane.client(ctrlq_envtest::ADMIN), plane.kubeconfig_file())
        }
    };
    let created = std::time::Instant::now();
    create_config_maps(&client, &a.namespace, a.configmaps).await;
    eprintln!(
        "livefirst: {} ConfigMaps in {} ready in {:.1} s; {} on {} ({} CPUs)",
        a.configmaps,
        a.namespace,
        created.elapsed().as_secs_f64(),
        if a.kubeconfig.is_some() {
            "a given cluster"
        } else {
            "a control plane of our own"
        },
        machine(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let api = Api::<ConfigMap>::namespaced(client, &a.namespace);
    let sides: Vec<&str> = if a.side == "all" {
        SIDES.to_vec()
    } else {
        vec![a.side.as_str()]
    };
    let mut out = a.out.as_ref().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    });
    let mut lines = Vec::new();
    for round in 0..a.rounds {
        for k in 0..sides.len() {
            let side = sides[(k + round) % sides.len()];
            let line = measure(&a, side, round, &kubeconfig, &api).await;
            println!("{line}");
            if let Some(out) = &mut out {
                writeln!(out, "{line}").expect("the --out file takes the line");
            }
            lines.push(line);
            // The API server settles (watch caches, the previous process's connections).
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    if lines.len() > 1 {
        print!("{}", table(&lines));
    }
}
