//! A seeded simulation of candidates contending on one [`MemoryStore`] under faults.
//!
//! Runs on paused time: call it inside a current-thread runtime built with `start_paused(true)`.
//! Each candidate loops on [`LeaderElector::run`]; its leading work records a term from
//! acquisition until its token fires (or its task is killed). The driver repeatedly kills the
//! current leader at a random moment (restarting it later under a new identity, as a new pod), and with `faults` also partitions,
//! slows, fails and makes candidates lose races.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::jitter::Jitter;
use crate::{LeaderElectionConfig, LeaderElector, MemoryLock, MemoryStore};

/// What one simulation run observed.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let report = leader::simulation::simulate(leader::LeaderElectionConfig::default(), 1, 3, 2, false).await;
/// assert_eq!(report.overlaps, 0);
/// assert_eq!(report.failovers.len(), 2);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Moments where two candidates considered themselves leader (terms that overlap).
    pub overlaps: usize,
    /// For each kill of a leader: from its last successful renew to the next term's start.
    pub failovers: Vec<Duration>,
    /// Terms recorded.
    pub terms: usize,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `candidates` candidates with `config`, kills the leader `kills` times, and checks the
/// terms never overlap. With `faults`, also injects partitions, slow operations, failures and
/// lost races before each kill.
///
/// # Panics
///
/// If the config is invalid.
pub async fn simulate(
    config: LeaderElectionConfig,
    seed: u64,
    candidates: usize,
    kills: usize,
    faults: bool,
) -> SimReport {
    let store = MemoryStore::new();
    let terms: Terms = Arc::default();
    let mut rng = Jitter::new(seed);
    let mut cands: Vec<Candidate> = (0..candidates)
        .map(|i| {
            start(
                &store,
                &config,
                &terms,
                i,
                seed.wrapping_mul(31).wrapping_add(i as u64),
                Duration::ZERO,
            )
        })
        .collect();
    let mut failovers = Vec::new();
    let secs = |rng: &mut Jitter, lo: f64, hi: f64| {
        Duration::from_secs_f64(lo + rng.next_f64() * (hi - lo))
    };
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
        );
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

fn start(
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
