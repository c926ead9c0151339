//! A seeded simulation of candidates contending on one [`MemoryStore`] under faults, on
//! paused time: call it inside a current-thread runtime built with `start_paused(true)`. Each
//! candidate loops on [`LeaderElector::run`]; its leading work records a term from acquisition
//! until its token fires (or its task is killed). The driver repeatedly kills the current leader
//! at a random moment (restarting it later under a new identity, as a new pod), and with
//! `faults` also partitions, slows, fails and makes candidates lose races, through the store's
//! fault injection (`test-util`). Test and bench support, included with `#[path]` by
//! `tests/simulation.rs` and the benches' `leader-failover` workload.

#![allow(dead_code)] // each includer uses its own part of it

use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryLock, MemoryStore};
use parking_lot::{Mutex, MutexGuard};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

/// splitmix64: the schedule's random numbers, deterministic per seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one simulation run observed.
#[derive(Debug, Clone, Default)]
pub(crate) struct SimReport {
    /// Moments where two candidates considered themselves leader (terms that overlap).
    pub(crate) overlaps: usize,
    /// For each kill of a leader: from its last successful renew to the next term's start.
    pub(crate) failovers: Vec<Duration>,
    /// Terms recorded.
    pub(crate) terms: usize,
}

#[derive(Debug)]
struct Term {
    who: usize,
    start: Instant,
    end: Option<Instant>,
}

type Terms = Arc<Mutex<Vec<Term>>>;

struct EndOnDrop(Terms, usize);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        lock(&self.0)[self.1].end = Some(Instant::now());
    }
}

struct Candidate {
    elector: Arc<LeaderElector<MemoryLock>>,
    task: JoinHandle<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Runs `candidates` candidates with `config`, kills the leader `kills` times, and checks the
/// terms never overlap. With `faults`, also injects partitions, slow operations, failures and
/// lost races before each kill.
///
/// # Panics
///
/// If the config is invalid.
pub(crate) async fn simulate(
    config: LeaderElectionConfig,
    seed: u64,
    candidates: usize,
    kills: usize,
    faults: bool,
) -> SimReport {
    simulate_with(MemoryStore::new(), config, seed, candidates, kills, faults).await
}

/// [`simulate`] on `store`.
///
/// # Panics
///
/// If the config is invalid.
pub(crate) async fn simulate_with(
    store: MemoryStore,
    config: LeaderElectionConfig,
    seed: u64,
    candidates: usize,
    kills: usize,
    faults: bool,
) -> SimReport {
    let terms: Terms = Arc::default();
    let mut rng = Rng::new(seed);
    let mut cands: Vec<Candidate> = Vec::with_capacity(candidates);
    for i in 0..candidates {
        cands.push(
            start(
                &store,
                &config,
                &terms,
                i,
                seed.wrapping_mul(31).wrapping_add(i as u64),
                Duration::ZERO,
            )
            .await,
        );
    }
    let mut failovers = Vec::new();
    let secs =
        |rng: &mut Rng, lo: f64, hi: f64| Duration::from_secs_f64(lo + rng.next_f64() * (hi - lo));
    let mut restarts = 0u64;
    while failovers.len() < kills {
        if faults {
            let i = (rng.next_f64() * candidates as f64) as usize;
            let id = cands[i].elector.identity().to_owned();
            match (rng.next_f64() * 4.0) as u32 {
                0 => {
                    store.partition(&id, true);
                    let (s, heal) = (store.clone(), secs(&mut rng, 0.0, 25.0));
                    tokio::spawn(async move {
                        sleep(heal).await;
                        s.partition(&id, false);
                    });
                }
                1 => store.delay_next(
                    &id,
                    1 + (rng.next_f64() * 5.0) as u32,
                    secs(&mut rng, 0.0, 8.0),
                ),
                2 => store.fail_next(&id, 1 + (rng.next_f64() * 5.0) as u32),
                _ => store.lose_next_update(&id, 1 + (rng.next_f64() * 3.0) as u32),
            }
        }
        sleep(secs(&mut rng, 1.0, 40.0)).await;
        let open = lock(&terms).iter().find(|t| t.end.is_none()).map(|t| t.who);
        let Some(i) = open else { continue };
        let last_renew = cands[i].elector.observed_at();
        cands[i].task.abort();
        let _ = (&mut cands[i].task).await;
        let before = lock(&terms).len();
        restarts += 1;
        cands[i] = start(
            &store,
            &config,
            &terms,
            i,
            seed ^ (restarts << 32),
            secs(&mut rng, 0.0, 30.0),
        )
        .await;
        let next = loop {
            let started = lock(&terms).get(before).map(|t| t.start);
            if let Some(start) = started {
                break start;
            }
            sleep(Duration::from_millis(10)).await;
        };
        failovers.push(next - last_renew);
    }
    for c in &cands {
        c.task.abort();
    }
    for c in cands {
        let _ = c.task.await;
    }
    let terms = lock(&terms);
    let mut sorted: Vec<&Term> = terms.iter().collect();
    sorted.sort_by_key(|t| t.start);
    let overlaps = sorted
        .windows(2)
        .filter(|w| w[0].end.is_none_or(|end| end > w[1].start))
        .count();
    SimReport {
        overlaps,
        failovers,
        terms: terms.len(),
    }
}

async fn start(
    store: &MemoryStore,
    config: &LeaderElectionConfig,
    terms: &Terms,
    i: usize,
    seed: u64,
    after: Duration,
) -> Candidate {
    let elector = Arc::new(
        LeaderElector::new(
            store.lock(format!("c{i}-{seed:x}")),
            config.clone().jitter_seed(seed),
        )
        .expect("the simulation's config is valid"),
    );
    let (e, terms) = (elector.clone(), terms.clone());
    let task = tokio::spawn(async move {
        sleep(after).await;
        loop {
            let terms = terms.clone();
            e.run(CancellationToken::new(), |l| async move {
                let idx = {
                    let mut t = lock(&terms);
                    t.push(Term {
                        who: i,
                        start: Instant::now(),
                        end: None,
                    });
                    t.len() - 1
                };
                let _end = EndOnDrop(terms, idx);
                l.token().cancelled().await;
            })
            .await;
        }
    });
    Candidate { elector, task }
}
