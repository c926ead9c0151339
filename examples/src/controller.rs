//! The controller of the main example: replicas elect a leader, the leader's workers drain a
//! rate-limited priority work queue fed by a synthetic event source, and the leader is killed
//! midway so another replica takes over and finishes the work.
//!
//! Everything reads time through `tokio::time`, so a test runs the whole story in virtual time
//! under a paused clock (see `examples/tests/controller.rs`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leader::{LeaderElectionConfig, LeaderElector, Leadership, Lock};
use queue_async::PriorityQueue;
use queue_async::metrics::MetricsProvider;
use queue_async::priority::AddOptions;
use ratelimit::default_controller_rate_limiter;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::rng::{SplitMix64, draw};

/// The priority of the initial list and of create events (background work).
pub const LOW: i32 = -10;
/// The priority of update events (a user changed something: serve it first).
pub const NORMAL: i32 = 0;

/// How a run is shaped. [`Options::default`] is the README's run.
///
/// # Examples
///
/// ```
/// let small = examples::controller::Options { objects: 20, ..Default::default() };
/// assert_eq!(small.replicas, 3);
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    /// Objects the event source creates (each a create event).
    pub objects: usize,
    /// Update events the source sends for random existing objects.
    pub updates: usize,
    /// Probability that one reconcile attempt fails, in `[0, 1)`.
    pub failure_rate: f64,
    /// Worker tasks of the leader.
    pub workers: usize,
    /// Controller replicas contending for the lease.
    pub replicas: usize,
    /// Seed of the event source and of the failures.
    pub seed: u64,
    /// Kill the leader once half the objects are reconciled.
    pub kill_leader: bool,
    /// Time between two events of the source.
    pub event_interval: Duration,
    /// Time one reconcile takes.
    pub work_time: Duration,
    /// Draw a live progress line on stderr.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            objects: 300,
            updates: 150,
            failure_rate: 0.2,
            workers: 4,
            replicas: 3,
            seed: 1,
            kill_leader: true,
            event_interval: Duration::from_millis(4),
            work_time: Duration::from_millis(3),
            progress: false,
        }
    }
}

/// Why a run did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The options cannot work (zero workers or replicas, a failure rate outside `[0, 1)`).
    #[error("invalid options: {0}")]
    Options(String),
    /// The election configuration was rejected.
    #[error(transparent)]
    Config(#[from] leader::ConfigError),
    /// No progress for `.0` (virtual or real) time: something is wedged.
    #[error("no progress for {0:?}; {1} objects still stale")]
    Stuck(Duration, usize),
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Objects created.
    pub objects: usize,
    /// Successful reconciles (an object reconciled twice, for two generations, counts twice).
    pub reconciled: u64,
    /// Failed attempts handed back with `requeue_rate_limited`.
    pub retries: u64,
    /// Median time from an event's add to the worker's `get`.
    pub latency_p50: Duration,
    /// 99th percentile of the same.
    pub latency_p99: Duration,
    /// The replica killed, if any.
    pub killed: Option<String>,
    /// From the kill to the next leader starting its work.
    pub failover: Option<Duration>,
    /// Every leader in order of their terms.
    pub leaders: Vec<String>,
    /// The most replicas that were leading at one moment (must be 1).
    pub max_concurrent_leaders: usize,
    /// Objects whose latest generation is not reconciled (0 after a complete run).
    pub stale: usize,
    /// Duration of the run.
    pub elapsed: Duration,
}

impl Summary {
    /// The leader at the end of the run.
    pub fn final_leader(&self) -> &str {
        self.leaders.last().map_or("none", String::as_str)
    }

    /// The summary as a person reads it.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use examples::controller::{Options, run_in_memory};
    /// let options = Options { objects: 20, updates: 10, ..Default::default() };
    /// let summary = run_in_memory(&options, None).await.unwrap();
    /// assert!(summary.render().contains("reconciled"));
    /// # }
    /// ```
    pub fn render(&self) -> String {
        let mut s = String::new();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let _ = writeln!(s, "objects            {}", self.objects);
        let _ = writeln!(
            s,
            "reconciled         {} (all generations)",
            self.reconciled
        );
        let _ = writeln!(s, "retries            {}", self.retries);
        let _ = writeln!(
            s,
            "queue latency      p50 {:.1} ms, p99 {:.1} ms",
            ms(self.latency_p50),
            ms(self.latency_p99)
        );
        match (&self.killed, self.failover) {
            (Some(k), Some(f)) => {
                let _ = writeln!(
                    s,
                    "failover           {k} killed; next leader after {:.2} s",
                    f.as_secs_f64()
                );
            }
            _ => {
                let _ = writeln!(s, "failover           none");
            }
        }
        let _ = writeln!(s, "leaders            {}", self.leaders.join(" -> "));
        let _ = writeln!(s, "final leader       {}", self.final_leader());
        let _ = writeln!(s, "two leaders at once {}", self.max_concurrent_leaders > 1);
        let _ = writeln!(s, "stale objects      {}", self.stale);
        let _ = write!(s, "elapsed            {:.2} s", self.elapsed.as_secs_f64());
        s
    }
}

/// The election timings of the example: short, so a failover takes about a second.
///
/// # Examples
///
/// ```
/// assert!(examples::controller::election_config().validate().is_ok());
/// ```
pub fn election_config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .name("example-controller")
        .lease_duration(Duration::from_secs(1))
        .renew_deadline(Duration::from_millis(600))
        .retry_period(Duration::from_millis(300))
}

/// Runs the example with its replicas on one in-memory store (the embedded default).
///
/// # Errors
///
/// See [`RunError`].
pub async fn run_in_memory(
    options: &Options,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Result<Summary, RunError> {
    let store = leader::MemoryStore::new();
    run(options, metrics, |id| store.lock(id)).await
}

/// Runs the example with `make_lock(identity)` as each replica's lock.
///
/// # Errors
///
/// See [`RunError`].
pub async fn run<L, F>(
    options: &Options,
    metrics: Option<Arc<dyn MetricsProvider>>,
    make_lock: F,
) -> Result<Summary, RunError>
where
    L: Lock + 'static,
    F: Fn(&str) -> L,
{
    validate(options)?;
    let start = Instant::now();
    let ctx = Arc::new(Ctx::new(options, metrics));

    let mut electors = Vec::new();
    let mut replicas = Vec::new();
    let cancel = CancellationToken::new();
    for r in 0..options.replicas {
        let id = format!("replica-{r}");
        let elector = Arc::new(LeaderElector::new(
            make_lock(&id),
            election_config().jitter_seed(options.seed ^ r as u64),
        )?);
        electors.push(elector.clone());
        let (ctx, cancel, id2) = (ctx.clone(), cancel.clone(), id.clone());
        let handle = tokio::spawn(async move {
            elector
                .run(cancel, move |leadership| lead(ctx, id2, leadership))
                .await;
        });
        replicas.push((id, handle));
    }
    let source = tokio::spawn(event_source(ctx.clone()));

    let mut killed = None;
    let mut kill_time = None;
    let mut last_progress = (0usize, Instant::now());
    let stall_limit = Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let fresh = ctx.fresh();
        if options.progress {
            draw_progress(&ctx, fresh, options.objects);
        }
        if source.is_finished() && fresh == options.objects {
            break;
        }
        if fresh != last_progress.0 {
            last_progress = (fresh, Instant::now());
        } else if last_progress.1.elapsed() > stall_limit {
            cancel.cancel();
            return Err(RunError::Stuck(stall_limit, options.objects - fresh));
        }
        if options.kill_leader
            && killed.is_none()
            && fresh * 2 >= options.objects
            && let Some(current) = ctx.current_leader()
            && let Some((_, handle)) = replicas.iter().find(|(id, _)| *id == current)
        {
            // A crash: the replica's task dies with its workers; the lease is not released
            // and must expire before another replica can take over.
            handle.abort();
            tracing::info!(replica = %current, "killed the leader");
            killed = Some(current);
            kill_time = Some(Instant::now());
        }
    }
    if options.progress {
        eprintln!();
    }
    cancel.cancel();
    for (_, handle) in replicas {
        let _ = handle.await;
    }
    let elapsed = start.elapsed();
    let terms = ctx.terms();
    let failover = kill_time.and_then(|k| {
        terms
            .iter()
            .find(|(_, started)| *started > k)
            .map(|(_, started)| *started - k)
    });
    let mut latencies = std::mem::take(&mut *lock(&ctx.latencies));
    latencies.sort_unstable();
    Ok(Summary {
        objects: options.objects,
        reconciled: ctx.reconciled.load(Ordering::Relaxed),
        retries: ctx.retries.load(Ordering::Relaxed),
        latency_p50: percentile(&latencies, 0.50),
        latency_p99: percentile(&latencies, 0.99),
        killed,
        failover,
        leaders: terms.into_iter().map(|(id, _)| id).collect(),
        max_concurrent_leaders: ctx.max_leading.load(Ordering::Relaxed),
        stale: options.objects - ctx.fresh(),
        elapsed,
    })
}

fn validate(o: &Options) -> Result<(), RunError> {
    if o.workers == 0 {
        return Err(RunError::Options("workers must be at least 1".into()));
    }
    if o.replicas == 0 {
        return Err(RunError::Options("replicas must be at least 1".into()));
    }
    if !(0.0..1.0).contains(&o.failure_rate) {
        return Err(RunError::Options(format!(
            "failure rate {} is outside [0, 1)",
            o.failure_rate
        )));
    }
    Ok(())
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One event of the synthetic source.
#[derive(Debug, Clone)]
struct Event {
    key: String,
    priority: i32,
}

/// One object of the fake cluster.
#[derive(Debug, Clone, Copy, Default)]
struct Object {
    generation: u64,
    reconciled: u64,
}

/// What every replica shares: the fake cluster, the event stream and the counters.
struct Ctx {
    options: Options,
    metrics: Option<Arc<dyn MetricsProvider>>,
    cluster: Mutex<HashMap<String, Object>>,
    fresh: AtomicUsize,
    events: broadcast::Sender<Event>,
    reconciled: AtomicU64,
    retries: AtomicU64,
    added: Mutex<HashMap<String, Instant>>,
    latencies: Mutex<Vec<Duration>>,
    /// `(identity, start)` of every term; the last is the current leader while `leading > 0`.
    terms: Mutex<Vec<(String, Instant)>>,
    leading: AtomicUsize,
    max_leading: AtomicUsize,
}

impl Ctx {
    fn new(options: &Options, metrics: Option<Arc<dyn MetricsProvider>>) -> Self {
        let (events, _) = broadcast::channel(options.objects + options.updates + 16);
        Self {
            options: options.clone(),
            metrics,
            cluster: Mutex::new(HashMap::new()),
            fresh: AtomicUsize::new(0),
            events,
            reconciled: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            added: Mutex::new(HashMap::new()),
            latencies: Mutex::new(Vec::new()),
            terms: Mutex::new(Vec::new()),
            leading: AtomicUsize::new(0),
            max_leading: AtomicUsize::new(0),
        }
    }

    /// Objects whose latest generation is reconciled.
    fn fresh(&self) -> usize {
        self.fresh.load(Ordering::Relaxed)
    }

    fn terms(&self) -> Vec<(String, Instant)> {
        lock(&self.terms).clone()
    }

    fn current_leader(&self) -> Option<String> {
        if self.leading.load(Ordering::Relaxed) == 0 {
            return None;
        }
        lock(&self.terms).last().map(|(id, _)| id.clone())
    }

    fn term_started(&self, id: &str) {
        lock(&self.terms).push((id.to_owned(), Instant::now()));
        lock(&self.added).clear();
        let now = self.leading.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_leading.fetch_max(now, Ordering::Relaxed);
    }

    fn term_ended(&self) {
        self.leading.fetch_sub(1, Ordering::Relaxed);
    }

    /// Applies one event to the cluster and publishes it.
    fn emit(&self, key: String, priority: i32) {
        {
            let mut cluster = lock(&self.cluster);
            let object = cluster.entry(key.clone()).or_default();
            if object.generation == object.reconciled && object.generation > 0 {
                self.fresh.fetch_sub(1, Ordering::Relaxed);
            }
            object.generation += 1;
        }
        // No receiver (between leaders) is fine: the next leader lists everything.
        let _ = self.events.send(Event { key, priority });
    }

    /// Keys of every object, for a new leader's initial list.
    fn list(&self) -> Vec<String> {
        let mut keys: Vec<String> = lock(&self.cluster).keys().cloned().collect();
        keys.sort_unstable();
        keys
    }

    /// One reconcile attempt of `key`: succeeds unless the seeded draw says it fails.
    fn reconcile(&self, key: &str, attempt: usize) -> bool {
        let mut cluster = lock(&self.cluster);
        let Some(object) = cluster.get_mut(key) else {
            return true;
        };
        let key_hash = key
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b));
        let roll = draw(&[
            self.options.seed,
            key_hash,
            object.generation,
            attempt as u64,
        ]);
        if roll < self.options.failure_rate {
            return false;
        }
        if object.reconciled != object.generation {
            object.reconciled = object.generation;
            self.fresh.fetch_add(1, Ordering::Relaxed);
        }
        self.reconciled.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn note_added(&self, key: &str) {
        lock(&self.added)
            .entry(key.to_owned())
            .or_insert_with(Instant::now);
    }

    fn note_got(&self, key: &str) {
        if let Some(added) = lock(&self.added).remove(key) {
            lock(&self.latencies).push(added.elapsed());
        }
    }
}

/// Sends `objects` creates (low priority) interleaved with `updates` updates of random existing
/// objects (normal priority), one every `event_interval`.
async fn event_source(ctx: Arc<Ctx>) {
    let o = &ctx.options;
    let mut rng = SplitMix64::new(o.seed);
    let (mut created, mut updated) = (0usize, 0usize);
    let mut tick = tokio::time::interval(o.event_interval);
    while created < o.objects || updated < o.updates {
        tick.tick().await;
        let update = created > 0
            && updated < o.updates
            && (created == o.objects
                || rng.below(o.objects as u64 + o.updates as u64) < o.updates as u64);
        if update {
            let i = rng.below(created as u64);
            ctx.emit(object_key(i as usize), NORMAL);
            updated += 1;
        } else {
            ctx.emit(object_key(created), LOW);
            created += 1;
        }
    }
}

fn object_key(i: usize) -> String {
    format!("default/object-{i:04}")
}

/// The leader's work: list, watch, and run the workers until leadership ends.
async fn lead(ctx: Arc<Ctx>, id: String, leadership: Leadership) {
    ctx.term_started(&id);
    // Ends the term when this future ends or is dropped (the replica was killed).
    let _term = Term(ctx.clone());
    tracing::info!(replica = %id, fencing = leadership.fencing_token(), "leading");
    let mut builder = PriorityQueue::<String>::builder()
        .name("example-controller")
        .rate_limiter(Arc::new(default_controller_rate_limiter()));
    if let Some(m) = &ctx.metrics {
        builder = builder.metrics(m.clone());
    }
    let queue = builder.build();
    // Watch before listing, so nothing created in between is missed (a duplicate is coalesced).
    let mut events = ctx.events.subscribe();
    for key in ctx.list() {
        ctx.note_added(&key);
        let _ = queue.add_with(key, AddOptions::default().priority(LOW));
    }
    let mut workers = JoinSet::new();
    for _ in 0..ctx.options.workers {
        workers.spawn(worker(ctx.clone(), queue.clone()));
    }
    loop {
        tokio::select! {
            () = leadership.token().cancelled() => break,
            event = events.recv() => match event {
                Ok(Event { key, priority }) => {
                    ctx.note_added(&key);
                    let _ = queue.add_with(key, AddOptions::default().priority(priority));
                }
                // The source is done; keep working until leadership ends.
                Err(broadcast::error::RecvError::Closed) => {
                    leadership.token().cancelled().await;
                    break;
                }
                // Fell behind the stream: relist, as an informer would.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for key in ctx.list() {
                        let _ = queue.add_with(key, AddOptions::default().priority(LOW));
                    }
                }
            },
        }
    }
    queue.shut_down();
    while workers.join_next().await.is_some() {}
    tracing::info!(replica = %id, "stopped leading");
}

struct Term(Arc<Ctx>);

impl Drop for Term {
    fn drop(&mut self) {
        self.0.term_ended();
    }
}

/// One worker: get, reconcile, then forget on success or requeue with the rate limiter.
async fn worker(ctx: Arc<Ctx>, queue: PriorityQueue<String>) {
    while let Some(item) = queue.get().await {
        ctx.note_got(item.key());
        tokio::time::sleep(ctx.options.work_time).await;
        let attempt = queue.num_requeues(item.key());
        if ctx.reconcile(item.key(), attempt) {
            queue.forget(item.key());
            item.done();
        } else {
            ctx.retries.fetch_add(1, Ordering::Relaxed);
            let _ = item.requeue_rate_limited();
        }
    }
}

fn draw_progress(ctx: &Ctx, fresh: usize, total: usize) {
    const WIDTH: usize = 30;
    let filled = (fresh * WIDTH).checked_div(total).unwrap_or(WIDTH);
    let leader = ctx.current_leader().unwrap_or_else(|| "(electing)".into());
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r[{}{}] {fresh:>5}/{total} fresh · retries {:>4} · leader {leader:<11}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        ctx.retries.load(Ordering::Relaxed),
    );
    let _ = err.flush();
}
