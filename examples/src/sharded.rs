//! The main example's `--shards N` mode: replicas of one controller split its keys into shards
//! held through leases; one replica is killed and another joins, and the shards follow.
//!
//! Every replica reconciles only the keys of the shards it holds; the run checks at every
//! reconcile start that no key is in two reconciles at once, and at the end that every object
//! was reconciled to its last generation.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ctrlq_controller::shard::{Sharding, ShardingError};
use ctrlq_controller::{Action, Context, Controller, Event};
use ctrlq_leader::{LeaderElectionConfig, Lock};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use crate::rng::SplitMix64 as Rng;

/// The shape of a sharded run.
#[derive(Debug, Clone)]
pub struct ShardedOptions {
    /// The shard count.
    pub shards: u32,
    /// Replicas at the start (one is killed, one joins).
    pub replicas: usize,
    /// Objects of the synthetic cluster; one in four changes during the run.
    pub objects: u32,
    /// Seed of the changes and the reconcile times.
    pub seed: u64,
    /// Each replica's shard electors and membership.
    pub election: LeaderElectionConfig,
    /// Put before every record name ([`Sharding::record_prefix`]), such as a path for etcd.
    pub record_prefix: String,
    /// Print what happens as it happens.
    pub verbose: bool,
}

impl Default for ShardedOptions {
    fn default() -> Self {
        Self {
            shards: 12,
            replicas: 3,
            objects: 120,
            seed: 1,
            election: crate::controller::election_config(),
            record_prefix: String::new(),
            verbose: false,
        }
    }
}

/// What a sharded run saw.
#[derive(Debug, Clone, Default)]
pub struct ShardedSummary {
    /// Time for the first replicas to hold every shard between them, evenly.
    pub settled: Duration,
    /// Time for the survivors to hold every shard after the kill.
    pub settled_after_kill: Duration,
    /// Time for every replica, the new one included, to hold its share after the join.
    pub settled_after_join: Duration,
    /// Shards that changed holder after the join.
    pub moved_on_join: usize,
    /// Shards each replica held at the end, by replica.
    pub held: Vec<(String, usize)>,
    /// Reconciles by replica.
    pub reconciles: Vec<(String, u64)>,
    /// Times a key was in two reconciles at once (must be 0).
    pub overlaps: u64,
    /// Objects not reconciled to their last generation at the end (must be 0).
    pub stale: usize,
}

impl ShardedSummary {
    /// A few lines for a person.
    #[must_use]
    pub fn render(&self) -> String {
        format!(
            "settled in {:?}; after the kill in {:?}; after the join in {:?} ({} shards moved)\n\
             held at the end: {:?}\nreconciles: {:?}\nkeys in two reconciles at once: {}; \
             objects left stale: {}",
            self.settled,
            self.settled_after_kill,
            self.settled_after_join,
            self.moved_on_join,
            self.held,
            self.reconciles,
            self.overlaps,
            self.stale,
        )
    }
}

/// The synthetic cluster: objects with generations, watchers, and who reconciles what now.
#[derive(Default)]
struct Cluster {
    generations: HashMap<u32, u64>,
    next: u64,
    watchers: Vec<mpsc::UnboundedSender<u32>>,
    reconciled: HashMap<u32, u64>,
    in_flight: HashMap<u32, String>,
    overlaps: u64,
    reconciles: HashMap<String, u64>,
}

type Shared = Arc<Mutex<Cluster>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Cluster {
    fn apply(&mut self, key: u32) {
        self.next += 1;
        self.generations.insert(key, self.next);
        self.watchers.retain(|w| w.send(key).is_ok());
    }
}

fn subscribe(cluster: &Shared) -> BoxStream<'static, u32> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut c = lock(cluster);
    for k in c.generations.keys() {
        let _ = tx.send(*k);
    }
    c.watchers.push(tx);
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) }).boxed()
}

/// Takes a key out of flight when dropped.
struct InFlight<'a>(&'a Shared, u32);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        lock(self.0).in_flight.remove(&self.1);
    }
}

struct Replica {
    id: String,
    shutdown: CancellationToken,
    held: watch::Receiver<BTreeSet<u32>>,
    run: JoinHandle<ctrlq_controller::Summary>,
}

/// Runs the sharded scenario with the locks `locks(replica, record)` makes (the record name must
/// reach the store as is: the members are listed by its prefix): the replicas
/// settle, the first is killed, a new one joins, everyone stops. The bounds are generous
/// multiples of the documented ones; a run that misses one fails.
///
/// # Errors
///
/// The [`ShardingError`] of bad options, or a message when the shards did not settle in time.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use examples::sharded::{ShardedOptions, run};
/// let store = ctrlq_leader::MemoryStore::new();
/// let summary = run(&ShardedOptions::default(), move |id, name| store.named_lock(name, id))
///     .await
///     .unwrap();
/// assert_eq!((summary.overlaps, summary.stale), (0, 0));
/// # }
/// ```
pub async fn run<L, F>(
    o: &ShardedOptions,
    locks: F,
) -> Result<ShardedSummary, Box<dyn std::error::Error + Send + Sync>>
where
    L: Lock,
    F: Fn(&str, &str) -> L + Clone + Send + Sync + 'static,
{
    let cluster: Shared = Arc::default();
    for k in 0..o.objects {
        lock(&cluster).apply(k);
    }
    let timing = o.election.timing();
    // Settling after a death: lease duration + 4.2 × retry period + grace (the `shard` module's
    // bound; the replicas' grace is 1 s), doubled for a loaded machine.
    let death_bound =
        (timing.lease_duration + timing.retry_period.mul_f64(4.2) + Duration::from_secs(1)) * 2;
    let settle_bound = timing.lease_duration * 4 + timing.retry_period * 10;
    let mut replicas = Vec::new();
    for i in 0..o.replicas {
        replicas.push(start(o, &cluster, &locks, &format!("replica-{i}"))?);
    }
    let settled = settle(o, &replicas, settle_bound).await?;
    say(o, format_args!("settled: {}", held_line(&replicas)));
    let changes = tokio::spawn(changes(cluster.clone(), o.objects, o.seed));

    let victim = replicas.remove(0);
    say(o, format_args!("killing {}", victim.id));
    victim.run.abort();
    let settled_after_kill = settle(o, &replicas, death_bound).await?;
    say(o, format_args!("after the kill: {}", held_line(&replicas)));

    let before: HashMap<u32, String> = holders(&replicas);
    replicas.push(start(
        o,
        &cluster,
        &locks,
        &format!("replica-{}", o.replicas),
    )?);
    say(o, format_args!("replica-{} joins", o.replicas));
    let settled_after_join = settle(o, &replicas, settle_bound).await?;
    let after = holders(&replicas);
    let moved_on_join = after
        .iter()
        .filter(|(s, h)| before.get(s) != Some(h))
        .count();
    say(o, format_args!("after the join: {}", held_line(&replicas)));

    let _ = changes.await;
    sleep(timing.lease_duration * 2).await;
    let held = replicas
        .iter()
        .map(|r| (r.id.clone(), r.held.borrow().len()))
        .collect();
    for r in &replicas {
        r.shutdown.cancel();
    }
    for r in replicas {
        let _ = r.run.await;
    }
    let c = lock(&cluster);
    let stale = c
        .generations
        .iter()
        .filter(|(k, g)| c.reconciled.get(k) != Some(g))
        .count();
    let mut reconciles: Vec<_> = c.reconciles.iter().map(|(r, n)| (r.clone(), *n)).collect();
    reconciles.sort();
    Ok(ShardedSummary {
        settled,
        settled_after_kill,
        settled_after_join,
        moved_on_join,
        held,
        reconciles,
        overlaps: c.overlaps,
        stale,
    })
}

fn start<L, F>(
    o: &ShardedOptions,
    cluster: &Shared,
    locks: &F,
    id: &str,
) -> Result<Replica, ShardingError>
where
    L: Lock,
    F: Fn(&str, &str) -> L + Clone + Send + Sync + 'static,
{
    let (locks, me) = (locks.clone(), id.to_owned());
    let sharding = Sharding::new(
        o.shards,
        id,
        move |name: &str| locks(&me, name),
        o.election.clone(),
    )?
    .record_prefix(o.record_prefix.clone());
    let held = sharding.subscribe_held();
    let (c, source) = (cluster.clone(), cluster.clone());
    let (who, hook_id) = (id.to_owned(), id.to_owned());
    let seed = o.seed ^ u64::from(id.bytes().map(u32::from).sum::<u32>());
    let rng = Mutex::new(Rng::new(seed));
    let verbose = o.verbose;
    let shutdown = CancellationToken::new();
    let controller = Controller::new("objects", move |key: u32, _ctx: Context| {
        let (c, who) = (c.clone(), who.clone());
        let took = Duration::from_millis(lock(&rng).below(20));
        async move {
            let generation = {
                let mut cl = lock(&c);
                if cl.in_flight.insert(key, who.clone()).is_some() {
                    cl.overlaps += 1;
                }
                *cl.reconciles.entry(who.clone()).or_default() += 1;
                cl.generations.get(&key).copied()
            };
            // Out of flight however the reconcile ends: done, or dropped with a killed replica.
            let _in_flight = InFlight(&c, key);
            sleep(took).await;
            if let Some(g) = generation {
                lock(&c).reconciled.insert(key, g);
            }
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .source(move || subscribe(&source))
    .workers(2)
    .grace_period(Duration::from_secs(1))
    .on_event(move |e| {
        if !verbose {
            return;
        }
        match e {
            Event::ShardLeading { shard, .. } => println!("  {hook_id}: leads shard {shard}"),
            Event::ShardEnded { shard, lost } => println!(
                "  {hook_id}: {} shard {shard}",
                if *lost { "lost" } else { "handed back" }
            ),
            Event::ShardingRefused { reason } => println!("  {hook_id}: takes no shard: {reason}"),
            _ => {}
        }
    })
    .sharded(sharding);
    Ok(Replica {
        id: id.to_owned(),
        shutdown: shutdown.clone(),
        held,
        run: tokio::spawn(controller.run(shutdown)),
    })
}

/// Changes a quarter of the objects at random, a few milliseconds apart.
async fn changes(cluster: Shared, objects: u32, seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..objects / 4 {
        sleep(Duration::from_millis(rng.below(20))).await;
        let key = u32::try_from(rng.below(u64::from(objects))).unwrap_or(0);
        lock(&cluster).apply(key);
    }
}

/// Waits until every shard is held once and the replicas hold ⌊n/m⌋ or ⌈n/m⌉ each.
async fn settle(
    o: &ShardedOptions,
    replicas: &[Replica],
    bound: Duration,
) -> Result<Duration, Box<dyn std::error::Error + Send + Sync>> {
    let start = Instant::now();
    let m = replicas.len().max(1);
    let n = o.shards as usize;
    loop {
        let counts: Vec<usize> = replicas.iter().map(|r| r.held.borrow().len()).collect();
        let total: usize = counts.iter().sum();
        if total == n && counts.iter().all(|&c| c == n / m || c == n.div_ceil(m)) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > bound {
            return Err(format!("not settled within {bound:?}: {}", held_line(replicas)).into());
        }
        sleep(Duration::from_millis(50)).await;
    }
}

fn holders(replicas: &[Replica]) -> HashMap<u32, String> {
    replicas
        .iter()
        .flat_map(|r| {
            r.held
                .borrow()
                .iter()
                .map(|s| (*s, r.id.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn held_line(replicas: &[Replica]) -> String {
    replicas
        .iter()
        .map(|r| format!("{} {:?}", r.id, *r.held.borrow()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn say(o: &ShardedOptions, what: std::fmt::Arguments<'_>) {
    if o.verbose {
        println!("{what}");
    }
}
