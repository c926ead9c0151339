//! `applierbench SIDE [--n N] [--workers W] [--sleep-ms MS]`: the controller runner against
//! kube-runtime's controller machinery on the same work, one side per process; prints one JSON
//! line in `wqbench`'s format (`WORKLOADS.md`, "controller-ours / controller-applier").
//!
//! `SIDE` is `ours` ([`ctrlq_controller::Controller`]) or `applier` (kube-runtime's
//! [`applier`], the loop under kube-runtime's `Controller::run`, wrapped as `Controller::run`
//! wraps it: each reconcile spawned as its own task through [`CancelableJoinHandle`]). No API
//! server is involved: before the timer starts, a reflector store is filled with `n`
//! `ConfigMap`s (namespace `ns-<i % 100>`, name `obj-<i>`, the keys of `WORKLOADS.md`) through
//! the watcher events of an initial list, and their `n` [`ObjectRef`]s are built. Timed: the
//! refs (each cloned as it is yielded) go to the side as its one source (ours, on `W` workers)
//! or its trigger stream (the applier, with `Config::concurrency(W)`), a stream that then stays
//! pending, as a watcher does after its initial list (the applier drops the requests it has not
//! started when its trigger stream ends, so a finite one would lose keys); each key is reconciled
//! once with its object from the store (the applier looks it up before the reconcile, ours
//! inside it, as the `controller::kube` docs show); the reconcile returns `Done` /
//! `await_change` at once, or after awaiting `tokio::time::sleep(MS ms)`. The run ends when the
//! `n`-th reconcile has been counted: ours cancels its shutdown token and returns after its drain;
//! the applier's output stream is dropped after its `n`-th result.
//!
//! Figures: `seconds` (wall, start to end of the run), `ops_per_sec` (`n / seconds`), extra
//! `cpu_s` (process user + system CPU over the run), `max_rss_bytes` (the process's peak RSS,
//! store included), `run_rss_bytes` (that peak minus the RSS just before the run: what the
//! machinery took), `steal_s` and `threads`.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use benches::common::{
    Extra, Params, Report, cpu_time, max_rss_bytes, rss_bytes, runtime, steal_time, threads,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;
use kube::runtime::{applier, watcher};
use tokio_util::sync::CancellationToken;

const USAGE: &str = "usage: applierbench ours|applier [--n N] [--workers W] [--sleep-ms MS]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (side, params, sleep_ms) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("{msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let steal0 = steal_time();
    let mut report = run(side, params, sleep_ms);
    if let (Some(before), Some(after)) = (steal0, steal_time()) {
        let stolen = after.saturating_sub(before).as_secs_f64();
        report.extra.push(("steal_s", Extra::Num(stolen)));
    }
    report.extra.push(("threads", Extra::Num(threads() as f64)));
    println!("{}", report.to_json());
    ExitCode::SUCCESS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    Applier,
}

fn parse(args: &[String]) -> Result<(Side, Params, u64), String> {
    let mut it = args.iter();
    let side = match it.next().map(String::as_str) {
        Some("ours") => Side::Ours,
        Some("applier") => Side::Applier,
        Some(other) => return Err(format!("unknown side {other:?}")),
        None => return Err("missing SIDE".to_owned()),
    };
    let mut params = Params {
        n: 10_000,
        producers: 1,
        ..Params::defaults()
    };
    let mut sleep_ms = 0;
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let value: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a whole number"))?;
        match flag.as_str() {
            "--n" => params.n = value,
            "--workers" => params.workers = value.max(1),
            "--sleep-ms" => sleep_ms = value,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if u16::try_from(params.workers).is_err() {
        return Err("--workers: at most 65535 (the applier's concurrency is a u16)".to_owned());
    }
    params.keys = params.n;
    Ok((side, params, sleep_ms))
}

/// What both sides' reconcile does with the object: keeps it alive past the optimizer, then
/// returns at once or after the sleep.
async fn work(object: Option<Arc<ConfigMap>>, sleep: Duration) {
    std::hint::black_box(&object);
    if !sleep.is_zero() {
        tokio::time::sleep(sleep).await;
    }
}

fn run(side: Side, params: Params, sleep_ms: u64) -> Report {
    let n = params.n;
    let (store, mut writer) = reflector::store::<ConfigMap>();
    writer.apply_watcher_event(&watcher::Event::Init);
    let mut refs = Vec::with_capacity(n as usize);
    for i in 0..n {
        let object = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("obj-{i}")),
                namespace: Some(format!("ns-{}", i % 100)),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        refs.push(ObjectRef::from_obj(&object));
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let refs = Arc::new(refs);
    let sleep = Duration::from_millis(sleep_ms);
    let rt = runtime();
    let rss0 = rss_bytes().unwrap_or(0);
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let reconciled = match side {
        Side::Ours => rt.block_on(rt.spawn(ours(params, store, refs, sleep))),
        Side::Applier => rt.block_on(rt.spawn(kube_applier(params, store, refs, sleep))),
    }
    .expect("the run does not panic");
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = (cpu_time() - cpu0).as_secs_f64();
    let max_rss = max_rss_bytes();
    drop(rt);
    Report {
        workload: match side {
            Side::Ours => "controller-ours",
            Side::Applier => "controller-applier",
        },
        params,
        seconds,
        ops_per_sec: n as f64 / seconds,
        extra: vec![
            ("ok", Extra::Bool(reconciled == n)),
            ("cpu_s", Extra::Num(cpu_s)),
            ("max_rss_bytes", Extra::Num(max_rss as f64)),
            (
                "run_rss_bytes",
                Extra::Num(max_rss.saturating_sub(rss0) as f64),
            ),
            ("sleep_ms", Extra::Num(sleep_ms as f64)),
        ],
    }
}

/// The keys through [`ctrlq_controller::Controller`]; returns how many were reconciled.
async fn ours(
    params: Params,
    store: Store<ConfigMap>,
    refs: Arc<Vec<ObjectRef<ConfigMap>>>,
    sleep: Duration,
) -> u64 {
    let n = params.n;
    let counted = Arc::new(AtomicU64::new(0));
    let shutdown = CancellationToken::new();
    let (count, stop) = (counted.clone(), shutdown.clone());
    let reconcile = move |key: ObjectRef<ConfigMap>, _ctx: ctrlq_controller::Context| {
        let object = store.get(&key);
        let (count, stop) = (count.clone(), stop.clone());
        async move {
            work(object, sleep).await;
            if count.fetch_add(1, Ordering::Relaxed) + 1 == n {
                stop.cancel();
            }
            Ok::<_, Infallible>(ctrlq_controller::Action::Done)
        }
    };
    let summary = ctrlq_controller::Controller::new("bench", reconcile)
        .source(move || {
            let refs = refs.clone();
            futures::stream::iter(0..refs.len())
                .map(move |i| refs[i].clone())
                .chain(futures::stream::pending())
        })
        .workers(params.workers as usize)
        .run(shutdown)
        .await;
    assert_eq!(summary.reconciles, counted.load(Ordering::Relaxed));
    counted.load(Ordering::Relaxed)
}

/// The keys through kube-runtime's applier, each reconcile spawned as kube-runtime's
/// `Controller::run` spawns it; returns how many were reconciled.
async fn kube_applier(
    params: Params,
    store: Store<ConfigMap>,
    refs: Arc<Vec<ObjectRef<ConfigMap>>>,
    sleep: Duration,
) -> u64 {
    let n = params.n;
    let counted = Arc::new(AtomicU64::new(0));
    let count = counted.clone();
    let reconcile = move |object: Arc<ConfigMap>, _ctx: Arc<()>| {
        let count = count.clone();
        let call = async move {
            work(Some(object), sleep).await;
            count.fetch_add(1, Ordering::Relaxed);
            Ok::<_, Infallible>(kube::runtime::controller::Action::await_change())
        };
        CancelableJoinHandle::spawn(call, &tokio::runtime::Handle::current())
    };
    let error_policy = |_: Arc<ConfigMap>, _: &Infallible, _: Arc<()>| {
        kube::runtime::controller::Action::await_change()
    };
    let trigger = futures::stream::iter(0..refs.len())
        .map(move |i| Ok::<_, Infallible>(refs[i].clone()))
        .chain(futures::stream::pending());
    let config = kube::runtime::Config::default().concurrency(params.workers as u16);
    let results = applier(
        reconcile,
        error_policy,
        Arc::new(()),
        store,
        trigger,
        config,
    );
    let mut results = std::pin::pin!(results);
    let mut done = 0;
    while done < n {
        match results.next().await {
            Some(Ok(_)) => done += 1,
            Some(Err(e)) => panic!("the applier failed: {e}"),
            None => break,
        }
    }
    assert_eq!(done, counted.load(Ordering::Relaxed));
    done
}
