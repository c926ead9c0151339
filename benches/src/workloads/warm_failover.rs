//! `warm-failover`: a leader's kill and its successor's first reconciles, with the warm standby
//! on and off (no Go peer: our own figures).
//!
//! For each of 1,000, 10,000 and 100,000 keys (`"ns-<i % 100>/obj-<i>"`), and each standby, `n`
//! runs (default 20), each on the in-memory lock in paused time with Kubernetes' timing
//! (15 s / 10 s / 2 s): replica `a` starts and lists; once its keys are reconciled, replica `b`
//! starts and follows; once `b`'s list is over too, `a` is killed at a seeded moment within a
//! retry period (nothing drained or released; the same seeded moments with the standby on and
//! off). A source is a modelled watch: its initial list
//! comes in pages of 500 keys, one page every 100 ms (an API server's paginated list), then it
//! stays open. Measured, in virtual seconds from the kill: `b`'s first reconcile, and the moment
//! `b` has reconciled every key once (a cold `b` lists again first); and from `b`'s lease won to
//! its first reconcile (`Event::FirstReconcile`); p50 / p99 over the runs.
//! Virtual time leaves out CPU time: the warm fill and the cold list both take no virtual time
//! beyond the modelled pages.
//!
//! Memory: in the first run of each size, the heap bytes `b` holds once its list is over (its
//! controller, elector and, warm, its view of every key), per key, both standbys.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_controller::{Action, Context, Controller, Event};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use futures::StreamExt;
use parking_lot::Mutex;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, key, percentile};

/// Keys per page of the modelled list, and the time each page takes.
const PAGE: u64 = 500;
const PAGE_TIME: Duration = Duration::from_millis(100);

/// The key counts measured.
const SIZES: [u64; 3] = [1_000, 10_000, 100_000];

/// What one replica's hook saw: when its first reconcile started, and how many reconciles
/// started, with the moment the count reached every key.
#[derive(Default)]
struct Seen {
    first: Option<Instant>,
    /// The last term's time from the lease won to its first reconcile.
    after_win: Option<Duration>,
    all: Option<Instant>,
    started: u64,
}

struct Replica {
    seen: Arc<Mutex<Seen>>,
    run: tokio::task::JoinHandle<ctrlq_controller::Summary>,
}

/// The modelled watch: `keys` keys in pages, then open for good.
fn listing(keys: u64) -> impl futures::Stream<Item = String> + Send {
    futures::stream::iter(0..keys.div_ceil(PAGE))
        .then(move |page| async move {
            sleep(PAGE_TIME).await;
            futures::stream::iter((page * PAGE..((page + 1) * PAGE).min(keys)).map(key))
        })
        .flatten()
        .chain(futures::stream::pending())
}

fn replica(store: &MemoryStore, id: &str, keys: u64, warm: bool) -> Replica {
    let config = LeaderElectionConfig::default();
    let elector = LeaderElector::new(store.lock(id), config).expect("valid election settings");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let hook = seen.clone();
    let controller = Controller::new("objects", |_key: String, _ctx: Context| {
        std::future::ready(Ok::<_, Infallible>(Action::Done))
    })
    .source(move || listing(keys))
    .workers(4)
    .leader_elector(Arc::new(elector))
    .warm_standby(warm)
    .on_event(move |e| match e {
        Event::ReconcileStarted { .. } => {
            let mut s = hook.lock();
            let now = Instant::now();
            s.first.get_or_insert(now);
            s.started += 1;
            if s.started == keys {
                s.all = Some(now);
            }
        }
        Event::FirstReconcile { after, .. } => hook.lock().after_win = Some(*after),
        _ => {}
    });
    Replica {
        seen,
        // Killed or dropped, never shut down: the run ends with the runtime.
        run: tokio::spawn(controller.run(CancellationToken::new())),
    }
}

/// The time a whole list takes, and a second more.
fn list_time(keys: u64) -> Duration {
    PAGE_TIME * u32::try_from(keys.div_ceil(PAGE)).unwrap_or(u32::MAX) + Duration::from_secs(1)
}

/// What one run measured, in seconds (and bytes per key).
struct Measured {
    first: f64,
    all: f64,
    after_win: f64,
    bytes: f64,
}

/// One run: kill → `b`'s first reconcile, kill → every key reconciled by `b`, `b`'s lease won →
/// its first reconcile, and `b`'s heap bytes per key when `measure`; `None` if `b` did not
/// reconcile every key within two minutes.
async fn one(keys: u64, warm: bool, kill_after: Duration, measure: bool) -> Option<Measured> {
    let store = MemoryStore::new();
    let a = replica(&store, "a", keys, warm);
    sleep(list_time(keys)).await;
    let region = Region::new(&INSTRUMENTED_SYSTEM);
    let b = replica(&store, "b", keys, warm);
    sleep(list_time(keys)).await;
    let bytes = if measure {
        let c = region.change();
        (c.bytes_allocated as f64 - c.bytes_deallocated as f64) / keys as f64
    } else {
        f64::NAN
    };
    sleep(kill_after).await;
    a.run.abort();
    let killed = Instant::now();
    let done = loop {
        let seen = {
            let s = b.seen.lock();
            (s.first, s.all, s.after_win)
        };
        if let (Some(first), Some(all), Some(after_win)) = seen {
            break Some(Measured {
                first: (first - killed).as_secs_f64(),
                all: (all - killed).as_secs_f64(),
                after_win: after_win.as_secs_f64(),
                bytes,
            });
        }
        if killed.elapsed() > Duration::from_secs(120) {
            break None;
        }
        sleep(Duration::from_millis(10)).await;
    };
    b.run.abort();
    done
}

/// Runs the workload.
pub(crate) fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 20,
        ..Params::defaults()
    });
    let (cpu0, t0) = (cpu_time(), std::time::Instant::now());
    let mut extra = Vec::new();
    let mut failed = 0u64;
    let mut runs = 0u64;
    for keys in SIZES {
        for warm in [true, false] {
            // The same kill moments with the standby on and off.
            let mut rng = SplitMix64::new(params.seed ^ keys);
            let (mut firsts, mut alls, mut wins) = (Vec::new(), Vec::new(), Vec::new());
            let mut bytes = f64::NAN;
            for run in 0..params.n {
                let kill_after = Duration::from_millis(rng.next() % 2_000);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .expect("the paused runtime must start");
                runs += 1;
                match rt.block_on(one(keys, warm, kill_after, run == 0)) {
                    Some(m) => {
                        firsts.push(m.first);
                        alls.push(m.all);
                        wins.push(m.after_win);
                        if run == 0 {
                            bytes = m.bytes;
                        }
                    }
                    None => failed += 1,
                }
            }
            firsts.sort_by(f64::total_cmp);
            alls.sort_by(f64::total_cmp);
            wins.sort_by(f64::total_cmp);
            let name: &'static str = match (keys, warm) {
                (1_000, true) => "warm_1k",
                (1_000, false) => "cold_1k",
                (10_000, true) => "warm_10k",
                (10_000, false) => "cold_10k",
                (_, true) => "warm_100k",
                (_, false) => "cold_100k",
            };
            extra.push((
                name,
                Extra::Obj(vec![
                    ("first_p50_s", percentile(&firsts, 50.0)),
                    ("first_p99_s", percentile(&firsts, 99.0)),
                    ("all_p50_s", percentile(&alls, 50.0)),
                    ("all_p99_s", percentile(&alls, 99.0)),
                    ("win_to_first_p50_s", percentile(&wins, 50.0)),
                    ("win_to_first_p99_s", percentile(&wins, 99.0)),
                    ("follower_bytes_per_key", bytes),
                ]),
            ));
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    extra.push(("failed", Extra::Num(failed as f64)));
    extra.push(("ok", Extra::Bool(failed == 0)));
    extra.push(("cpu_s", Extra::Num((cpu_time() - cpu0).as_secs_f64())));
    Report {
        workload: "warm-failover",
        params,
        seconds,
        ops_per_sec: runs as f64 / seconds,
        extra,
    }
}
