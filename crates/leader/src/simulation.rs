//! A seeded simulation of candidates contending on one store under faults: a [`MemoryStore`]
//! ([`simulate`]) or any [`SimBackend`] ([`simulate_with`]), such as the emulated Kubernetes API
//! server of [`lease_emulation`](crate::lease_emulation) with the `kube` feature.
//!
//! Runs on paused time: call it inside a current-thread runtime built with `start_paused(true)`.
//! Each candidate loops on [`LeaderElector::run`]; its leading work records a term from
//! acquisition until its token fires (or its task is killed). The driver repeatedly kills the
//! current leader at a random moment (restarting it later under a new identity, as a new pod), and with `faults` also partitions,
//! slows, fails and makes candidates lose races.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::jitter::Jitter;
use crate::{LeaderElectionConfig, LeaderElector, Lock, MemoryStore};

/// A store the simulation can run candidates on and inject faults into, per candidate.
pub trait SimBackend: Clone + Send + Sync + 'static {
    /// The lock each candidate gets.
    type Lock: Lock;

    /// A lock for the candidate `identity`.
    fn lock(&self, identity: &str) -> impl Future<Output = Self::Lock> + Send;

    /// Cuts `identity` off from the store or reconnects it.
    fn partition(&self, identity: &str, partitioned: bool);

    /// Slows the next `ops` operations of `identity` by `delay` each.
    fn slow(&self, identity: &str, ops: u32, delay: Duration);

    /// Fails the next `ops` operations of `identity`.
    fn fail(&self, identity: &str, ops: u32);

    /// Makes the next `ops` updates of `identity` lose a race to another writer.
    fn lose_race(&self, identity: &str, ops: u32);
}

impl SimBackend for MemoryStore {
    type Lock = crate::MemoryLock;

    async fn lock(&self, identity: &str) -> Self::Lock {
        MemoryStore::lock(self, identity)
    }

    fn partition(&self, identity: &str, partitioned: bool) {
        MemoryStore::partition(self, identity, partitioned);
    }

    fn slow(&self, identity: &str, ops: u32, delay: Duration) {
        self.delay_next(identity, ops, delay);
    }

    fn fail(&self, identity: &str, ops: u32) {
        self.fail_next(identity, ops);
    }

    fn lose_race(&self, identity: &str, ops: u32) {
        self.lose_next_update(identity, ops);
    }
}

/// The emulated API server: each candidate a `LeaseLock` on the Lease `default/sim` through its
/// own listener. A lost race is a third party rewriting the Lease's labels; a slow candidate
/// gets the latency for `ops` × `delay`.
#[cfg(feature = "kube")]
#[derive(Clone, Debug)]
pub struct LeaseBackend(pub std::sync::Arc<crate::lease_emulation::LeaseServer>);

#[cfg(feature = "kube")]
impl SimBackend for LeaseBackend {
    type Lock = crate::LeaseLock;

    async fn lock(&self, identity: &str) -> Self::Lock {
        let client = self
            .0
            .client(identity)
            .await
            .expect("a local listener for the emulated API server");
        crate::LeaseLock::new(client, "default", "sim", identity)
    }

    fn partition(&self, identity: &str, partitioned: bool) {
        self.0.partition(identity, partitioned);
    }

    fn slow(&self, identity: &str, ops: u32, delay: Duration) {
        self.0.latency(identity, delay);
        let (server, id) = (self.0.clone(), identity.to_owned());
        tokio::spawn(async move {
            sleep(delay * ops).await;
            server.latency(&id, Duration::ZERO);
        });
    }

    fn fail(&self, identity: &str, ops: u32) {
        let faults = vec![crate::lease_emulation::Fault::InternalError; ops as usize];
        self.0.fail_next(identity, &faults);
    }

    fn lose_race(&self, _identity: &str, ops: u32) {
        for _ in 0..ops {
            self.0.modify("default", "sim", |l| {
                l["metadata"]["labels"] = serde_json::json!({"touched": "by a third party"});
            });
        }
    }
}

/// What one simulation run observed.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let report = ctrlq_leader::simulation::simulate(ctrlq_leader::LeaderElectionConfig::default(), 1, 3, 2, false).await;
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

struct Candidate<L> {
    elector: Arc<LeaderElector<L>>,
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
pub async fn simulate(
    config: LeaderElectionConfig,
    seed: u64,
    candidates: usize,
    kills: usize,
    faults: bool,
) -> SimReport {
    simulate_with(MemoryStore::new(), config, seed, candidates, kills, faults).await
}

/// [`simulate`] on any [`SimBackend`].
///
/// # Panics
///
/// If the config is invalid.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use ctrlq_leader::simulation::simulate_with;
/// let store = ctrlq_leader::MemoryStore::new();
/// let report = simulate_with(store, ctrlq_leader::LeaderElectionConfig::default(), 1, 3, 1, true).await;
/// assert_eq!(report.overlaps, 0);
/// # }
/// ```
pub async fn simulate_with<B: SimBackend>(
    store: B,
    config: LeaderElectionConfig,
    seed: u64,
    candidates: usize,
    kills: usize,
    faults: bool,
) -> SimReport {
    let terms: Terms = Arc::default();
    let mut rng = Jitter::new(seed);
    let mut cands: Vec<Candidate<B::Lock>> = Vec::with_capacity(candidates);
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
                1 => store.slow(
                    &id,
                    1 + (rng.next_f64() * 5.0) as u32,
                    secs(&mut rng, 0.0, 8.0),
                ),
                2 => store.fail(&id, 1 + (rng.next_f64() * 5.0) as u32),
                _ => store.lose_race(&id, 1 + (rng.next_f64() * 3.0) as u32),
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

async fn start<B: SimBackend>(
    store: &B,
    config: &LeaderElectionConfig,
    terms: &Terms,
    i: usize,
    seed: u64,
    after: Duration,
) -> Candidate<B::Lock> {
    let elector = Arc::new(
        LeaderElector::new(
            store.lock(&format!("c{i}-{seed:x}")).await,
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
