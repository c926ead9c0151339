//! The sharded controller's workloads (no Go peer: our own figures).
//!
//! - `shard-settle`: `n` runs (default 40), each on the in-memory store in paused time with
//!   Kubernetes' timing (15 s / 10 s / 2 s) and a 2 s grace period: 3 replicas and 12 shards
//!   settle at 4/4/4; at a seeded moment a seeded replica is killed (virtual seconds until the
//!   other two hold 6/6); then a replica joins (virtual seconds until 4/4/4 again). p50 / p99 /
//!   max of both against the bounds the `shard` module states: LD + 4.2 × RP + grace after a
//!   death, grace + 4.2 × RP after a join.
//! - `shard-spread`: `n` keys (default 20,000) through 1, 2 and 4 replicas of one controller in
//!   one process, 8 shards, real time on the 2-thread runtime, each reconcile a CPU-bound loop of
//!   `keys` (default 20,000) splitmix64 rounds: keys per second at each replica count, and how evenly
//!   the reconciles spread (the busiest replica's share against 1/m). On a 2-core machine this
//!   shows balance, not speed-up: the replicas share the same two cores.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctrlq_controller::shard::Sharding;
use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, percentile};

struct Replica {
    shutdown: CancellationToken,
    held: watch::Receiver<BTreeSet<u32>>,
    run: tokio::task::JoinHandle<ctrlq_controller::Summary>,
}

/// The keys a replica's source lists once `go` is true (a relist lists them again).
#[derive(Clone)]
struct Keys {
    keys: Arc<Vec<u32>>,
    go: Arc<watch::Sender<bool>>,
}

impl Keys {
    fn new(keys: Vec<u32>, go: bool) -> Self {
        Self {
            keys: Arc::new(keys),
            go: Arc::new(watch::Sender::new(go)),
        }
    }

    fn listing(&self) -> impl futures::Stream<Item = u32> + Send + use<> {
        let (mut go, keys) = (self.go.subscribe(), self.keys.clone());
        futures::stream::once(async move {
            let _ = go.wait_for(|go| *go).await;
        })
        .flat_map(move |()| futures::stream::iter(keys.as_ref().clone()))
    }
}

fn replica(
    store: &MemoryStore,
    id: &str,
    shards: u32,
    config: &LeaderElectionConfig,
    keys: &Keys,
    work: u64,
    counter: Arc<AtomicU64>,
) -> Replica {
    let keys = keys.clone();
    let (s, me) = (store.clone(), id.to_owned());
    let sharding = Sharding::new(
        shards,
        id,
        move |name: &str| s.named_lock(name, me.clone()),
        config.clone(),
    )
    .expect("valid sharding settings");
    let held = sharding.subscribe_held();
    let shutdown = CancellationToken::new();
    let controller = Controller::new("objects", move |key: u32, _ctx: Context| {
        // CPU-bound: `work` rounds of splitmix64.
        let mut rng = SplitMix64::new(u64::from(key));
        for _ in 0..work {
            std::hint::black_box(rng.next());
        }
        counter.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok::<_, Infallible>(Action::Done))
    })
    .source(move || keys.listing())
    .workers(2)
    .grace_period(Duration::from_secs(2))
    .sharded(sharding);
    let run = tokio::spawn(controller.run(shutdown.clone()));
    Replica {
        shutdown,
        held,
        run,
    }
}

/// Waits until the replicas hold ⌊n/m⌋ or ⌈n/m⌉ shards each and every shard once; the time it
/// took, or `None` past `bound`.
async fn settle(replicas: &[&Replica], shards: usize, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    let m = replicas.len();
    loop {
        let counts: Vec<usize> = replicas.iter().map(|r| r.held.borrow().len()).collect();
        let all: BTreeSet<u32> = replicas
            .iter()
            .flat_map(|r| r.held.borrow().clone())
            .collect();
        if all.len() == shards
            && counts.iter().sum::<usize>() == shards
            && counts
                .iter()
                .all(|&c| c == shards / m || c == shards.div_ceil(m))
        {
            return Some(start.elapsed());
        }
        if start.elapsed() > bound {
            return None;
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// `shard-settle`.
pub(crate) fn run_settle(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 40,
        ..Params::defaults()
    });
    let config = LeaderElectionConfig::default();
    let timing = config.timing();
    let grace = Duration::from_secs(2);
    let death_bound = timing.lease_duration + timing.retry_period.mul_f64(4.2) + grace;
    let join_bound = grace + timing.retry_period.mul_f64(4.2);
    let (cpu0, t0) = (cpu_time(), std::time::Instant::now());
    let mut kills = Vec::new();
    let mut joins = Vec::new();
    let mut unsettled = 0u64;
    let mut rng = SplitMix64::new(params.seed);
    for _ in 0..params.n {
        let (wait_ms, victim) = (rng.next() % 30_000, rng.next() % 3);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("the paused runtime must start");
        let (kill, join) = rt
            .block_on(async {
                let store = MemoryStore::new();
                let keys = Keys::new((0..200).collect(), true);
                let count = Arc::new(AtomicU64::new(0));
                let mut replicas: Vec<Replica> = (0..3)
                    .map(|i| {
                        let id = format!("r{i}");
                        replica(&store, &id, 12, &config, &keys, 0, count.clone())
                    })
                    .collect();
                let all: Vec<&Replica> = replicas.iter().collect();
                settle(&all, 12, Duration::from_secs(120)).await?;
                sleep(Duration::from_millis(wait_ms)).await;
                // A kill: its run is dropped, nothing drained or released.
                let victim = replicas.remove(usize::try_from(victim).unwrap_or(0));
                victim.run.abort();
                let survivors: Vec<&Replica> = replicas.iter().collect();
                let kill = settle(&survivors, 12, death_bound * 2).await;
                let joined = replica(&store, "r3", 12, &config, &keys, 0, count);
                let mut all: Vec<&Replica> = replicas.iter().collect();
                all.push(&joined);
                let join = settle(&all, 12, join_bound * 4).await;
                for r in replicas.iter().chain([&joined]) {
                    r.shutdown.cancel();
                }
                Some((kill, join))
            })
            .unwrap_or((None, None));
        match (kill, join) {
            (Some(k), Some(j)) => {
                kills.push(k.as_secs_f64());
                joins.push(j.as_secs_f64());
            }
            _ => unsettled += 1,
        }
    }
    kills.sort_by(f64::total_cmp);
    joins.sort_by(f64::total_cmp);
    let seconds = t0.elapsed().as_secs_f64();
    let stats = |v: &[f64], bound: Duration| {
        Extra::Obj(vec![
            ("p50", percentile(v, 50.0)),
            ("p99", percentile(v, 99.0)),
            ("max", v.last().copied().unwrap_or(f64::NAN)),
            ("bound", bound.as_secs_f64()),
        ])
    };
    let kill_max = kills.last().copied().unwrap_or(f64::NAN);
    let join_max = joins.last().copied().unwrap_or(f64::NAN);
    Report {
        workload: "shard-settle",
        params,
        seconds,
        ops_per_sec: kills.len() as f64 / seconds,
        extra: vec![
            ("after_kill_s", stats(&kills, death_bound)),
            ("after_join_s", stats(&joins, join_bound)),
            ("unsettled", Extra::Num(unsettled as f64)),
            (
                "ok",
                Extra::Bool(
                    unsettled == 0
                        && kill_max <= death_bound.as_secs_f64()
                        && join_max <= join_bound.as_secs_f64(),
                ),
            ),
            ("cpu_s", Extra::Num((cpu_time() - cpu0).as_secs_f64())),
        ],
    }
}

/// `shard-spread`.
pub(crate) fn run_spread(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 20_000,
        keys: 20_000,
        ..Params::defaults()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    // Short timing, so the replicas settle fast in real time.
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(1))
        .renew_deadline(Duration::from_millis(600))
        .retry_period(Duration::from_millis(200));
    let n = u32::try_from(params.n).unwrap_or(u32::MAX);
    let (cpu0, t0) = (cpu_time(), std::time::Instant::now());
    let mut extra = Vec::new();
    let mut ok = true;
    for m in [1usize, 2, 4] {
        let (rate, busiest) = rt.block_on(async {
            let store = MemoryStore::new();
            let counters: Vec<Arc<AtomicU64>> = (0..m).map(|_| Arc::default()).collect();
            // The sources list the keys only once the replicas have settled, so the timed part
            // is the keys alone.
            let keys = Keys::new((0..n).collect(), false);
            let replicas: Vec<Replica> = (0..m)
                .map(|i| {
                    let id = format!("r{i}");
                    replica(
                        &store,
                        &id,
                        8,
                        &config,
                        &keys,
                        params.keys,
                        counters[i].clone(),
                    )
                })
                .collect();
            let all: Vec<&Replica> = replicas.iter().collect();
            let settled = settle(&all, 8, Duration::from_secs(30)).await.is_some();
            let total = || {
                counters
                    .iter()
                    .map(|c| c.load(Ordering::Relaxed))
                    .sum::<u64>()
            };
            let start = Instant::now();
            keys.go.send_replace(true);
            while total() < params.n && start.elapsed() < Duration::from_secs(300) {
                sleep(Duration::from_millis(5)).await;
            }
            let took = start.elapsed().as_secs_f64();
            for r in &replicas {
                r.shutdown.cancel();
            }
            let most = counters.iter().map(|c| c.load(Ordering::Relaxed)).max();
            let busiest = most.unwrap_or(0) as f64 / total().max(1) as f64;
            let done = settled && total() >= params.n;
            (
                if done {
                    params.n as f64 / took
                } else {
                    f64::NAN
                },
                busiest,
            )
        });
        ok &= rate.is_finite();
        extra.push((
            match m {
                1 => "replicas_1",
                2 => "replicas_2",
                _ => "replicas_4",
            },
            Extra::Obj(vec![
                ("keys_per_s", rate),
                ("busiest_share", busiest),
                ("even_share", 1.0 / m as f64),
            ]),
        ));
    }
    let seconds = t0.elapsed().as_secs_f64();
    extra.push(("ok", Extra::Bool(ok)));
    extra.push(("cpu_s", Extra::Num((cpu_time() - cpu0).as_secs_f64())));
    Report {
        workload: "shard-spread",
        params,
        seconds,
        ops_per_sec: params.n as f64 * 3.0 / seconds,
        extra,
    }
}
