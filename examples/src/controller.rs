//! The controller of the main example, built on [`ctrlq_controller::Controller`]: replicas of one
//! controller share a lease; a synthetic cluster creates and updates objects; the leader
//! reconciles them (some attempts fail and are retried with backoff, each success asks for a check
//! again half a second later); midway the leader is killed
//! and another replica takes over warm: its queue is filled from the keys its own watch yielded
//! while it followed, with no listing, and it reconciles at once; at the end every replica shuts
//! down and the leader drains.
//!
//! Everything reads time through `tokio::time`, so a test runs the whole story in virtual time
//! under a paused clock (see `examples/tests/controller.rs`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ctrlq_controller::prometheus::ControllerMetrics;
use ctrlq_controller::{Action, Context, Controller, Event, ReconcileOutcome};
use ctrlq_leader::prometheus::LeaderMetrics;
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, Lock};
use ctrlq_queue_async::metrics::MetricsProvider;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::rng::{SplitMix64, draw};

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
    /// Objects the cluster creates.
    pub objects: usize,
    /// Updates the cluster makes to random existing objects.
    pub updates: usize,
    /// Probability that one reconcile attempt fails, in `[0, 1)`.
    pub failure_rate: f64,
    /// Concurrent reconciles of the leader.
    pub workers: usize,
    /// Controller replicas contending for the lease.
    pub replicas: usize,
    /// Seed of the cluster's changes and of the failures.
    pub seed: u64,
    /// Kill the leader once half the objects are reconciled.
    pub kill_leader: bool,
    /// Time between two changes of the cluster.
    pub event_interval: Duration,
    /// Time one reconcile takes.
    pub work_time: Duration,
    /// Draw a live progress line on stderr.
    pub progress: bool,
    /// Print each event (leader changes, the first failures, the drain) as it happens.
    pub verbose: bool,
    /// Report controller-runtime's reconcile metrics here.
    pub controller_metrics: Option<Arc<ControllerMetrics>>,
    /// Report the electors' leader-election metrics here.
    pub leader_metrics: Option<Arc<LeaderMetrics>>,
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
            verbose: false,
            controller_metrics: None,
            leader_metrics: None,
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
    Config(#[from] ctrlq_leader::ConfigError),
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
    /// Failed attempts, each retried after the rate limiter's backoff.
    pub retries: u64,
    /// Median time from an object's change to the start of the reconcile that saw it.
    pub latency_p50: Duration,
    /// 99th percentile of the same.
    pub latency_p99: Duration,
    /// The replica killed, if any.
    pub killed: Option<String>,
    /// From the kill to the next leader's term.
    pub failover: Option<Duration>,
    /// The next leader's warm start: the keys its queue was filled with from its warm view, and
    /// the time from winning the lease to its first reconcile.
    pub warm_start: Option<(usize, Duration)>,
    /// The longest a failover can take with the example's election timings.
    pub failover_bound: Duration,
    /// Every leader in order of their terms.
    pub leaders: Vec<String>,
    /// The most replicas that were in reconcile at one moment, checked at every reconcile start
    /// and end (must be 1).
    pub max_concurrent_leaders: usize,
    /// Reconcile starts and ends at which that was checked.
    pub checks: u64,
    /// Objects whose latest generation is not reconciled (0 after a complete run).
    pub stale: usize,
    /// The final leader's drain: reconciles in flight at the shutdown, and dropped at its end.
    pub drain: Option<(u64, u64)>,
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
    /// assert!(summary.render().contains("every object at its last generation: yes"));
    /// # }
    /// ```
    pub fn render(&self) -> String {
        let mut s = String::new();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let yes = |b: bool| if b { "yes" } else { "NO" };
        let _ = writeln!(
            s,
            "objects            {} ; every object at its last generation: {} ({} stale)",
            self.objects,
            yes(self.stale == 0),
            self.stale
        );
        let _ = writeln!(
            s,
            "reconciles         {} succeeded, {} failed and retried with backoff",
            self.reconciled, self.retries
        );
        let _ = writeln!(
            s,
            "change to reconcile p50 {:.1} ms, p99 {:.1} ms",
            ms(self.latency_p50),
            ms(self.latency_p99)
        );
        let bound = self.failover_bound.as_secs_f64();
        match (&self.killed, self.failover) {
            (Some(k), Some(f)) => {
                let _ = writeln!(
                    s,
                    "failover           {k} killed; next leader after {:.2} s (bound {bound:.2} s: {})",
                    f.as_secs_f64(),
                    yes(f <= self.failover_bound)
                );
            }
            (Some(k), None) => {
                let _ = writeln!(s, "failover           {k} killed; no next leader");
            }
            _ => {
                let _ = writeln!(s, "failover           none");
            }
        }
        if let Some((keys, after)) = self.warm_start {
            let _ = writeln!(
                s,
                "warm start         {keys} keys from the next leader's warm view, no listing; \
                 first reconcile {:.1} ms after winning the lease",
                ms(after)
            );
        }
        let _ = writeln!(s, "leaders            {}", self.leaders.join(" -> "));
        let _ = writeln!(
            s,
            "two replicas at once {} (checked at {} reconcile starts and ends)",
            if self.max_concurrent_leaders > 1 {
                "YES"
            } else {
                "never"
            },
            self.checks
        );
        if let Some((in_flight, dropped)) = self.drain {
            let _ = writeln!(
                s,
                "drain              {} finished {} in-flight reconciles, dropped {dropped}",
                self.final_leader(),
                in_flight - dropped
            );
        }
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
        .release_on_cancel(true)
}

/// The bound on each lock request (etcd, Lease) with [`election_config`]: a lock's bound may not
/// exceed the renew deadline.
///
/// # Examples
///
/// ```
/// let config = examples::controller::election_config();
/// assert!(examples::controller::REQUEST_TIMEOUT <= std::time::Duration::from_millis(600));
/// # drop(config);
/// ```
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest failover with [`election_config`]: the lease must expire, then a follower's next
/// jittered retry (up to 2.2 retry periods) takes it.
pub const FAILOVER_BOUND: Duration = Duration::from_millis(1_000 + 660);

/// Runs the example with its replicas on one in-memory store (the embedded default).
///
/// # Errors
///
/// See [`RunError`].
pub async fn run_in_memory(
    options: &Options,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Result<Summary, RunError> {
    let store = ctrlq_leader::MemoryStore::new();
    run(options, metrics, |id| store.lock(id)).await
}

/// Runs the example with `make_lock(identity)` as each replica's lock; `metrics` receives the
/// work queue's client-go metrics.
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
    let cluster = Arc::new(Cluster::new(options));
    let shutdown = CancellationToken::new();
    let mut replicas: Vec<(String, JoinHandle<ctrlq_controller::Summary>)> = Vec::new();
    for r in 0..options.replicas {
        let id = format!("replica-{r}");
        let config = election_config().jitter_seed(options.seed ^ r as u64);
        let mut elector = LeaderElector::new(make_lock(&id), config)?;
        if let Some(m) = &options.leader_metrics {
            elector = elector.metrics(m.clone());
        }
        let elector = Arc::new(elector);
        let c = replica(&cluster, &id, metrics.clone()).leader_elector(elector);
        replicas.push((id, tokio::spawn(c.run(shutdown.clone()))));
    }
    let source = tokio::spawn(cluster.clone().changes());

    let (mut killed, mut kill_time) = (None, None);
    let mut last_progress = (0usize, Instant::now());
    let stall_limit = Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let fresh = cluster.fresh();
        if options.progress {
            cluster.draw_progress(fresh);
        }
        if source.is_finished() && fresh == options.objects {
            break;
        }
        if fresh != last_progress.0 {
            last_progress = (fresh, Instant::now());
        } else if last_progress.1.elapsed() > stall_limit {
            shutdown.cancel();
            return Err(RunError::Stuck(stall_limit, options.objects - fresh));
        }
        if options.kill_leader
            && killed.is_none()
            && fresh * 2 >= options.objects
            && let Some(current) = cluster.current_leader()
            && let Some((_, handle)) = replicas.iter().find(|(id, _)| *id == current)
        {
            // A crash: the replica's task dies with its workers; the lease is not released
            // and must expire before another replica can take over.
            handle.abort();
            cluster.say(format_args!(
                "{current} killed (a crash: its lease must expire)"
            ));
            killed = Some(current);
            kill_time = Some(Instant::now());
        }
    }
    if options.progress {
        eprintln!();
    }
    // Shut down while the leader is busy with its re-checks, so the drain has work to finish.
    let busy = tokio::time::timeout(RECHECK * 2, async {
        while !cluster.reconciling() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let _ = busy.await;
    cluster.say(format_args!(
        "all objects reconciled; shutting down every replica"
    ));
    shutdown.cancel();
    for (_, handle) in replicas {
        let _ = handle.await;
    }
    Ok(cluster.summary(start, killed, kill_time))
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

/// The reconcile's error: the synthetic cluster refused the write.
#[derive(Debug, thiserror::Error)]
#[error("conflict writing {0} (injected failure)")]
pub struct Conflict(String);

/// One replica of the controller: reconcile, source, workers, events.
fn replica(
    cluster: &Arc<Cluster>,
    id: &str,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Controller<String, Conflict> {
    let (c, source, events) = (cluster.clone(), cluster.clone(), cluster.clone());
    let id = id.to_owned();
    let mut controller = Controller::new("example-controller", move |key: String, ctx: Context| {
        let c = c.clone();
        async move {
            let seen = c.observe(&key);
            tokio::time::sleep(c.options.work_time).await;
            c.reconcile(&key, seen, ctx.attempts())
        }
    })
    // Each term lists every object, then follows changes, as a watch does.
    .source(move || source.subscribe())
    .workers(cluster.options.workers)
    .grace_period(Duration::from_secs(1))
    .on_event(move |e| events.on_event(&id, e));
    if let Some(m) = metrics {
        controller = controller.queue_metrics(m);
    }
    if let Some(m) = &cluster.options.controller_metrics {
        controller = controller.metrics(m.clone());
    }
    controller
}

/// One object of the synthetic cluster.
#[derive(Debug, Clone, Copy)]
struct Object {
    generation: u64,
    reconciled: u64,
    /// When the oldest change not yet seen by a reconcile was made.
    changed: Option<Instant>,
}

/// The synthetic cluster and what the replicas report.
struct Cluster {
    options: Options,
    start: Instant,
    objects: Mutex<HashMap<String, Object>>,
    watchers: Mutex<Vec<mpsc::UnboundedSender<String>>>,
    fresh: AtomicUsize,
    reconciled: AtomicU64,
    retries: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
    log: Mutex<Log>,
}

/// What the event hook tracks across replicas.
#[derive(Default)]
struct Log {
    /// `(identity, start)` of every term.
    terms: Vec<(String, Instant)>,
    /// `(start, keys)` of every term filled from a warm view.
    warm_starts: Vec<(Instant, usize)>,
    /// `(start of the reconcile, time since the term began)` of every term's first reconcile.
    first_reconciles: Vec<(Instant, Duration)>,
    leading: Option<String>,
    in_reconcile: HashMap<String, usize>,
    max_concurrent: usize,
    checks: u64,
    failures_printed: u64,
    drain: Option<(u64, u64)>,
}

/// How long after a successful reconcile an object is checked again.
const RECHECK: Duration = Duration::from_millis(500);

/// Failures printed as they happen; the rest are counted in the summary.
const FAILURES_PRINTED: u64 = 8;

impl Cluster {
    fn new(options: &Options) -> Self {
        Self {
            options: options.clone(),
            start: Instant::now(),
            objects: Mutex::new(HashMap::new()),
            watchers: Mutex::new(Vec::new()),
            fresh: AtomicUsize::new(0),
            reconciled: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            latencies: Mutex::new(Vec::new()),
            log: Mutex::new(Log::default()),
        }
    }

    fn say(&self, what: std::fmt::Arguments<'_>) {
        if self.options.verbose {
            let t = self.start.elapsed().as_secs_f64();
            if self.options.progress {
                eprint!("\r\x1b[2K");
            }
            println!("[{t:6.2} s] {what}");
        }
    }

    /// Objects whose latest generation is reconciled.
    fn fresh(&self) -> usize {
        self.fresh.load(Ordering::Relaxed)
    }

    /// Whether some replica is in reconcile now.
    fn reconciling(&self) -> bool {
        lock(&self.log).in_reconcile.values().any(|n| *n > 0)
    }

    fn current_leader(&self) -> Option<String> {
        lock(&self.log).leading.clone()
    }

    /// A watch: every object's key (sorted), then each changed key.
    fn subscribe(&self) -> BoxStream<'static, String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let objects = lock(&self.objects);
        let mut keys: Vec<&String> = objects.keys().collect();
        keys.sort_unstable();
        for k in keys {
            let _ = tx.send(k.clone());
        }
        lock(&self.watchers).push(tx);
        drop(objects);
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) })
            .boxed()
    }

    /// Creates or updates `key`, then tells the watchers.
    fn change(&self, key: String) {
        let mut objects = lock(&self.objects);
        let o = objects.entry(key.clone()).or_insert(Object {
            generation: 0,
            reconciled: 0,
            changed: None,
        });
        if o.generation == o.reconciled && o.generation > 0 {
            self.fresh.fetch_sub(1, Ordering::Relaxed);
        }
        o.generation += 1;
        o.changed.get_or_insert_with(Instant::now);
        lock(&self.watchers).retain(|w| w.send(key.clone()).is_ok());
    }

    /// `objects` creates interleaved with `updates` updates of random existing objects, one
    /// every `event_interval`.
    async fn changes(self: Arc<Self>) {
        let o = &self.options;
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
                self.change(object_key(i as usize));
                updated += 1;
            } else {
                self.change(object_key(created));
                created += 1;
            }
        }
    }

    /// What a reconcile reads first: the object's generation (recording how long the change
    /// waited).
    fn observe(&self, key: &str) -> u64 {
        let mut objects = lock(&self.objects);
        let Some(o) = objects.get_mut(key) else {
            return 0;
        };
        if let Some(changed) = o.changed.take() {
            lock(&self.latencies).push(changed.elapsed());
        }
        o.generation
    }

    /// The reconcile's write: fails when the seeded draw says so, else marks `seen` reconciled.
    fn reconcile(&self, key: &str, seen: u64, attempts: u32) -> Result<Action, Conflict> {
        let key_hash = key
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b));
        let roll = draw(&[self.options.seed, key_hash, seen, u64::from(attempts)]);
        if roll < self.options.failure_rate {
            self.retries.fetch_add(1, Ordering::Relaxed);
            return Err(Conflict(key.to_owned()));
        }
        let mut objects = lock(&self.objects);
        if let Some(o) = objects.get_mut(key)
            && seen > o.reconciled
        {
            if o.reconciled != o.generation && seen == o.generation {
                self.fresh.fetch_add(1, Ordering::Relaxed);
            }
            o.reconciled = seen;
        }
        self.reconciled.fetch_add(1, Ordering::Relaxed);
        // Check again later, as controllers do for drift nobody reports: the leader is never
        // idle for long, so the final shutdown has reconciles in flight to drain.
        Ok(Action::requeue_after(RECHECK))
    }

    /// The replicas' event hook: leader changes, overlap checks, failures, drains.
    fn on_event(&self, replica: &str, e: &Event<'_, String>) {
        let mut log = lock(&self.log);
        match e {
            Event::Leading { fencing_token } => {
                log.terms.push((replica.to_owned(), Instant::now()));
                log.leading = Some(replica.to_owned());
                drop(log);
                let term = fencing_token.unwrap_or_default();
                self.say(format_args!("{replica} leads (fencing token {term})"));
            }
            Event::WarmStart { keys, .. } => {
                log.warm_starts.push((Instant::now(), *keys));
                drop(log);
                self.say(format_args!(
                    "{replica} starts warm: {keys} keys from its view, no listing"
                ));
            }
            Event::FirstReconcile { after, .. } => {
                log.first_reconciles.push((Instant::now(), *after));
                drop(log);
                self.say(format_args!(
                    "{replica} reconciles {:.1} ms after winning the lease",
                    after.as_secs_f64() * 1e3
                ));
            }
            Event::ReconcileStarted { .. } => {
                *log.in_reconcile.entry(replica.to_owned()).or_default() += 1;
                log.check();
            }
            Event::ReconcileFinished { key, outcome, .. } => {
                log.check();
                if let Some(n) = log.in_reconcile.get_mut(replica) {
                    *n -= 1;
                }
                if matches!(outcome, ReconcileOutcome::Error(_)) {
                    log.failures_printed += 1;
                    let n = log.failures_printed;
                    drop(log);
                    if n <= FAILURES_PRINTED {
                        self.say(format_args!(
                            "{replica}: {key} failed; retried with backoff"
                        ));
                    } else if n == FAILURES_PRINTED + 1 {
                        self.say(format_args!(
                            "(further failures are counted in the summary)"
                        ));
                    }
                }
            }
            Event::LeadershipLost { aborted } => {
                log.leading = None;
                drop(log);
                self.say(format_args!(
                    "{replica} lost the lease; dropped {aborted} in-flight reconciles"
                ));
            }
            Event::DrainStarted { in_flight } => {
                log.drain = Some((*in_flight, 0));
                drop(log);
                self.say(format_args!(
                    "{replica} drains: no new keys, {in_flight} in-flight reconciles may finish"
                ));
            }
            Event::DrainFinished { aborted } => {
                if let Some(d) = &mut log.drain {
                    d.1 = *aborted;
                }
                log.leading = None;
                drop(log);
                self.say(format_args!(
                    "{replica} drained ({aborted} dropped) and released the lease"
                ));
            }
            _ => {}
        }
    }

    fn summary(&self, start: Instant, killed: Option<String>, kill: Option<Instant>) -> Summary {
        let log = lock(&self.log);
        let failover = kill.and_then(|k| {
            log.terms
                .iter()
                .find(|(_, started)| *started > k)
                .map(|(_, started)| *started - k)
        });
        let warm_start = kill.and_then(|k| {
            let keys = log.warm_starts.iter().find(|(at, _)| *at > k)?.1;
            let after = log.first_reconciles.iter().find(|(at, _)| *at > k)?.1;
            Some((keys, after))
        });
        let mut latencies = lock(&self.latencies).clone();
        latencies.sort_unstable();
        Summary {
            objects: self.options.objects,
            reconciled: self.reconciled.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            latency_p50: percentile(&latencies, 0.50),
            latency_p99: percentile(&latencies, 0.99),
            killed,
            failover,
            warm_start,
            failover_bound: FAILOVER_BOUND,
            leaders: log.terms.iter().map(|(id, _)| id.clone()).collect(),
            max_concurrent_leaders: log.max_concurrent,
            checks: log.checks,
            stale: self.options.objects - self.fresh(),
            drain: log.drain,
            elapsed: start.elapsed(),
        }
    }

    fn draw_progress(&self, fresh: usize) {
        const WIDTH: usize = 30;
        let total = self.options.objects;
        let filled = (fresh * WIDTH).checked_div(total).unwrap_or(WIDTH);
        let leader = self.current_leader().unwrap_or_else(|| "(electing)".into());
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}{}] {fresh:>5}/{total} fresh · retries {:>4} · leader {leader:<11}",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            self.retries.load(Ordering::Relaxed),
        );
        let _ = err.flush();
    }
}

impl Log {
    /// One check: how many replicas are in reconcile now.
    fn check(&mut self) {
        let now = self.in_reconcile.values().filter(|n| **n > 0).count();
        self.max_concurrent = self.max_concurrent.max(now);
        self.checks += 1;
    }
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

fn object_key(i: usize) -> String {
    format!("default/object-{i:04}")
}
