//! Failover on a real kube-apiserver: three replicas of a controller, each leader-gated on one
//! Kubernetes Lease through `LeaseLock`, on a control plane this program starts (kube-apiserver
//! and etcd built by `scripts/install-controlplane`, started by `ctrlq-envtest`). The leader is killed (its task dropped
//! without a release, as a killed process) `--runs` times at a seeded moment and replaced by a
//! new replica; each run measures the wall time from the kill to the next leader's first
//! reconcile. Per election setting it prints one JSON line: the failover p50 / p99 / max in
//! seconds against the documented bound (lease duration + 4.4 × retry period after the last
//! renew); and, over ten retry periods of a steady leader before the kills, the Lease requests
//! per second per candidate by verb and the mean PUT (renew) latency, both from the API server's
//! own metrics (`apiserver_request_total`,
//! `apiserver_request_duration_seconds`).
//!
//! With `--configmaps N` it measures a warm standby against a cold one instead: N ConfigMaps,
//! each replica's source a `kube::Watch` of them (`keys`), the short setting, `--runs`
//! kills each way; per kill, the time to the next leader's first reconcile and to its
//! reconcile of every ConfigMap, and the ConfigMap LIST requests the API server served from the
//! kill until then.
//!
//! usage: `apiserver_failover [--runs N] [--setting default|short|both] [--seed S]
//! [--configmaps N]`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctrlq_controller::{Action, Context, Controller};
use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Each reconcile: which replica, when.
type Reconciles = Arc<Mutex<Vec<(String, Instant)>>>;

struct Replica {
    id: String,
    elector: Arc<LeaderElector<LeaseLock>>,
    task: JoinHandle<()>,
}

fn start(
    plane: &ControlPlane,
    ns: &str,
    id: String,
    config: &LeaderElectionConfig,
    timeout: Duration,
    seen: &Reconciles,
) -> Replica {
    let lock = LeaseLock::new(plane.client(ADMIN), ns, "failover", &id).request_timeout(timeout);
    let elector = Arc::new(LeaderElector::new(lock, config.clone()).expect("a valid setting"));
    let (me, seen) = (id.clone(), seen.clone());
    let reconcile = move |_key: u32, _ctx: Context| {
        seen.lock().unwrap().push((me.clone(), Instant::now()));
        async { Ok::<_, std::convert::Infallible>(Action::requeue_after(Duration::from_secs(1))) }
    };
    let run = Controller::new("failover", reconcile)
        .source(|| futures::stream::iter(0..10u32))
        .workers(2)
        .leader_elector(elector.clone())
        .run(CancellationToken::new());
    let task = tokio::spawn(async move {
        run.await;
    });
    Replica { id, elector, task }
}

const WARM_NS: &str = "warm";

/// The short setting: LD 4 s, RD 3 s, RP 0.5 s, requests bounded by 1 s.
fn short() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500))
}

/// Creates [`WARM_NS`] and `n` ConfigMaps in it, 32 requests at a time.
async fn create_config_maps(plane: &ControlPlane, n: usize) {
    let admin = plane.client(ADMIN);
    benches::replicas::create_config_maps(&admin, [WARM_NS.to_owned()], n, |_| WARM_NS.to_owned())
        .await;
}

/// A replica whose source watches the ConfigMaps; it notes each reconcile.
fn start_watching(plane: &ControlPlane, id: String, warm: bool, seen: &Reconciles) -> Replica {
    use ctrlq_controller::kube::Watch;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::watcher;
    let lock = LeaseLock::new(plane.client(ADMIN), WARM_NS, "failover", &id)
        .request_timeout(Duration::from_secs(1));
    let elector = Arc::new(LeaderElector::new(lock, short()).expect("a valid setting"));
    let api = kube::Api::<ConfigMap>::namespaced(plane.client(ADMIN), WARM_NS);
    let (me, seen) = (id.clone(), seen.clone());
    let reconcile = move |_key: ObjectRef<ConfigMap>, _ctx: Context| {
        seen.lock().unwrap().push((me.clone(), Instant::now()));
        async { Ok::<_, std::convert::Infallible>(Action::Done) }
    };
    let run = Controller::new("configmaps", reconcile)
        .try_source(Watch::new(api, watcher::Config::default()).keys())
        .workers(4)
        .warm_standby(warm)
        .leader_elector(elector.clone())
        .run(CancellationToken::new());
    let task = tokio::spawn(async move {
        run.await;
    });
    Replica { id, elector, task }
}

/// Warm or cold standbys over `keys` ConfigMaps: `runs` kills of the leader.
async fn measure_warm(plane: &ControlPlane, keys: usize, runs: usize, warm: bool) -> String {
    let seen = Reconciles::default();
    let tag = if warm { "warm" } else { "cold" };
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| start_watching(plane, format!("{tag}-r{i}"), warm, &seen))
        .collect();
    let lists = || {
        plane.metric(
            "apiserver_request_total",
            &["resource=\"configmaps\"", "verb=\"LIST\""],
        )
    };
    let (mut first, mut all, mut listed) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        // A leader that reconciled every key, so the kill meets a settled replica set.
        let leader = loop {
            let done = replicas.iter().position(|r| {
                r.elector.is_leader()
                    && seen
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(id, _)| *id == r.id)
                        .count()
                        >= keys
            });
            if let Some(i) = done {
                break i;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The followers' watches listed by now (a warm standby lists once, at its start).
        tokio::time::sleep(Duration::from_secs(2)).await;
        seen.lock().unwrap().clear();
        let killed = replicas[leader].id.clone();
        let lists_before = lists().await;
        replicas[leader].task.abort();
        let kill = Instant::now();
        let (next_first, next_all) = loop {
            let (count, first_at, last_at) = {
                let seen = seen.lock().unwrap();
                let mine: Vec<Instant> = seen
                    .iter()
                    .filter(|(id, at)| *id != killed && *at > kill)
                    .map(|(_, at)| *at)
                    .collect();
                (mine.len(), mine.first().copied(), mine.last().copied())
            };
            if count >= keys {
                break (first_at.unwrap(), last_at.unwrap());
            }
            assert!(
                kill.elapsed() < Duration::from_secs(120),
                "{tag} run {run}: {count} of {keys} keys 120 s after the kill"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        listed.push(lists().await - lists_before);
        first.push((next_first - kill).as_secs_f64());
        all.push((next_all - kill).as_secs_f64());
        replicas[leader] = start_watching(plane, format!("{tag}-r{}", run + 3), warm, &seen);
    }
    for r in &replicas {
        r.task.abort();
    }
    for v in [&mut first, &mut all] {
        v.sort_by(f64::total_cmp);
    }
    let mean_lists = listed.iter().sum::<f64>() / listed.len().max(1) as f64;
    format!(
        "{{\"workload\": \"apiserver-warm-failover\", \"standby\": \"{tag}\", \"configmaps\": {keys}, \
         \"runs\": {runs}, \"first_reconcile_s\": {{\"p50\": {:.3}, \"p99\": {:.3}}}, \
         \"every_key_s\": {{\"p50\": {:.3}, \"p99\": {:.3}}}, \"configmap_lists_per_failover\": \
         {mean_lists:.2}}}",
        percentile(&first, 50.0),
        percentile(&first, 99.0),
        percentile(&all, 50.0),
        percentile(&all, 99.0),
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

async fn lease_requests(plane: &ControlPlane, verb: &str) -> f64 {
    let verb = format!("verb=\"{verb}\"");
    plane
        .metric("apiserver_request_total", &["resource=\"leases\"", &verb])
        .await
}

async fn measure(plane: &ControlPlane, name: &str, runs: usize, seed: u64) -> String {
    let (config, timeout) = match name {
        "default" => (LeaderElectionConfig::default(), Duration::from_secs(5)),
        _ => (
            LeaderElectionConfig::default()
                .lease_duration(Duration::from_secs(4))
                .renew_deadline(Duration::from_secs(3))
                .retry_period(Duration::from_millis(500)),
            Duration::from_secs(1),
        ),
    };
    let timing = config.timing();
    let (ld, rp) = (timing.lease_duration, timing.retry_period);
    let bound = (ld + rp.mul_f64(4.4)).as_secs_f64();
    let ns = format!("failover-{name}");
    create_namespace(&plane.client(ADMIN), &ns).await;
    let verbs = ["GET", "PUT", "POST", "LIST"];
    let put = ["resource=\"leases\"", "verb=\"PUT\""];
    let seen = Reconciles::default();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| start(plane, &ns, format!("r{i}"), &config, timeout, &seen))
        .collect();
    // The steady state: one leader renewing, two followers reading, for ten retry periods after
    // the first leader's first reconcile.
    while seen.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut before = Vec::new();
    for verb in verbs {
        before.push(lease_requests(plane, verb).await);
    }
    let put_sum0 = plane
        .metric("apiserver_request_duration_seconds_sum", &put)
        .await;
    let put_count0 = plane
        .metric("apiserver_request_duration_seconds_count", &put)
        .await;
    let started = Instant::now();
    tokio::time::sleep(rp * 10).await;
    let elapsed = started.elapsed().as_secs_f64();
    let mut rates = Vec::new();
    for (verb, b) in verbs.iter().zip(before) {
        let per_s = (lease_requests(plane, verb).await - b) / elapsed / 3.0;
        rates.push(format!("\"{verb}\": {per_s:.3}"));
    }
    let put_sum = plane
        .metric("apiserver_request_duration_seconds_sum", &put)
        .await
        - put_sum0;
    let put_count = plane
        .metric("apiserver_request_duration_seconds_count", &put)
        .await
        - put_count0;

    let mut rng = seed | 1;
    let mut failovers = Vec::new();
    for run in 0..runs {
        // A leader, then a seeded moment in its renew cycle.
        let leader = loop {
            if let Some(i) = replicas.iter().position(|r| r.elector.is_leader()) {
                break i;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wait = rp.mul_f64(1.0 + (rng % 1000) as f64 / 1000.0 * 2.0);
        tokio::time::sleep(wait).await;
        let killed = replicas[leader].id.clone();
        replicas[leader].task.abort();
        let kill = Instant::now();
        let next = loop {
            let found = seen
                .lock()
                .unwrap()
                .iter()
                .find(|(id, at)| *id != killed && *at > kill)
                .map(|(_, at)| *at);
            if let Some(at) = found {
                break at;
            }
            assert!(
                kill.elapsed() < Duration::from_secs(120),
                "no next leader 120 s after kill {run}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        failovers.push((next - kill).as_secs_f64());
        seen.lock().unwrap().clear();
        replicas[leader] = start(plane, &ns, format!("r{}", run + 3), &config, timeout, &seen);
    }
    for r in &replicas {
        r.task.abort();
    }
    failovers.sort_by(f64::total_cmp);
    let max = failovers.last().copied().unwrap_or(f64::NAN);
    format!(
        "{{\"workload\": \"apiserver-failover\", \"setting\": \"{name}\", \"lease_duration_s\": {}, \
         \"renew_deadline_s\": {}, \"retry_period_s\": {}, \"runs\": {runs}, \"failover_s\": \
         {{\"p50\": {:.3}, \"p99\": {:.3}, \"max\": {max:.3}, \"bound\": {bound:.3}}}, \
         \"steady_lease_requests_per_s_per_candidate\": {{{}}}, \"renew_put_mean_ms\": {:.3}, \
         \"ok\": {}}}",
        ld.as_secs_f64(),
        timing.renew_deadline.as_secs_f64(),
        rp.as_secs_f64(),
        percentile(&failovers, 50.0),
        percentile(&failovers, 99.0),
        rates.join(", "),
        put_sum / put_count.max(1.0) * 1000.0,
        max <= bound && failovers.len() == runs
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut setting, mut seed, mut configmaps) = (20usize, "both".to_owned(), 1u64, 0);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--runs" => runs = value.parse().expect("--runs N"),
            "--setting" => setting = value,
            "--seed" => seed = value.parse().expect("--seed S"),
            "--configmaps" => configmaps = value.parse().expect("--configmaps N"),
            other => {
                eprintln!(
                    "unknown flag {other}\nusage: apiserver_failover [--runs N] \
                     [--setting default|short|both] [--seed S] [--configmaps N]"
                );
                std::process::exit(2);
            }
        }
    }
    let plane = ControlPlane::start().await;
    if configmaps > 0 {
        create_config_maps(&plane, configmaps).await;
        for warm in [true, false] {
            println!("{}", measure_warm(&plane, configmaps, runs, warm).await);
        }
        return;
    }
    for name in ["short", "default"] {
        if setting == name || setting == "both" {
            println!("{}", measure(&plane, name, runs, seed).await);
        }
    }
}
