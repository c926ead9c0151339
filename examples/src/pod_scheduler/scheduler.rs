//! [`Scheduler`]: the leader-elected loop that pops pods, runs one cycle per pod and binds.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ctrlq_leader::{LeaderElectionConfig, LeaderElector, Leadership, LeadershipEnd, LeaseLock};
use ctrlq_queue_async::scheduling::{Popped, SchedulingQueueConfig};
use kube::Client;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cache::Cache;
use super::informer::Informers;
use super::queue::{FIT, PodQueue, pod_queue};
use super::resources::PodInfo;

/// A scheduler replica: stands for election on a Lease and, while it leads, schedules the
/// pods that name it.
///
/// # Examples
///
/// ```no_run
/// use examples::pod_scheduler::{Scheduler, SchedulerConfig};
/// use tokio_util::sync::CancellationToken;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let config = SchedulerConfig::new("ctrlq-scheduler", "replica-a");
/// let scheduler = Scheduler::new(client, config)?;
/// let stop = CancellationToken::new(); // cancel it on SIGTERM
/// let terms = scheduler.run(stop).await;
/// println!("led {terms} terms; {:?}", scheduler.report());
/// # Ok(())
/// # }
/// ```
pub struct Scheduler {
    client: Client,
    config: SchedulerConfig,
    elector: LeaderElector<LeaseLock>,
    shared: Arc<Shared>,
}

/// How a [`Scheduler`] runs.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use examples::pod_scheduler::SchedulerConfig;
///
/// let config = SchedulerConfig::new("ctrlq-scheduler", "replica-a").parallel_binds(32);
/// assert_eq!(config.lease_name, "ctrlq-scheduler");
/// assert_eq!(config.lease_namespace, "kube-system");
/// ```
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The `spec.schedulerName` of the pods it schedules.
    pub scheduler_name: String,
    /// This replica's identity on the Lease.
    pub identity: String,
    /// The Lease's namespace (`kube-system` by default).
    pub lease_namespace: String,
    /// The Lease's name (the scheduler's name by default).
    pub lease_name: String,
    /// The queue's backoffs and unschedulable timeout (kube-scheduler's defaults).
    pub queue: SchedulingQueueConfig,
    /// The election's timing (client-go's defaults, released on a stop).
    pub election: LeaderElectionConfig,
    /// How many binds may be in flight at once (16 by default).
    pub parallel_binds: usize,
    /// A label selector for the Nodes it places pods on (all Nodes by default).
    pub node_selector: Option<String>,
}

/// What a [`Scheduler`] did so far, over all its terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Terms led.
    pub terms: u64,
    /// Every bind the API server accepted, in order (one entry per bind: what the tests and
    /// the binary's printout read; a scheduler meant to run for months would keep counts).
    pub bound: Vec<Bound>,
    /// Attempts handed back as unschedulable (no node had room).
    pub unschedulable: u64,
    /// Binds the API server refused or that failed on the way.
    pub bind_errors: u64,
    /// `PodScheduled` condition writes that failed.
    pub status_errors: u64,
    /// Errors from the watches (each retried with a backoff).
    pub watch_errors: u64,
    /// Objects whose quantities could not be read: a pod's requests (left unscheduled, or
    /// not counted on its node) or a node's allocatable (left out).
    pub unreadable: u64,
    /// Pods the hints moved out of unschedulable on an event.
    pub moved_by_events: u64,
}

/// One bind the API server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// The attempt that bound it (1 for the first pop).
    pub attempts: u32,
    /// How long it had been queued when it was popped for this attempt: since it was added,
    /// or since its last attempt failed (the queue's timestamp).
    pub queued_for: Duration,
    /// The fencing token of the term that bound it.
    pub fencing_token: u64,
}

/// A [`Scheduler`] that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The queue's settings are inconsistent.
    #[error("scheduling queue settings")]
    Queue(#[source] ctrlq_queue_async::scheduling::ConfigError),
    /// The election's settings are inconsistent.
    #[error("leader election settings")]
    Election(#[source] ctrlq_leader::ConfigError),
}

/// What the replica's terms publish: the report, and the current term's queue.
#[derive(Debug, Default)]
struct Shared {
    report: Mutex<Report>,
    queue: Mutex<Option<PodQueue>>,
}

/// What the watchers and the cycles of one term share, under one lock (taken before the
/// queue's, never while a hint runs).
#[derive(Debug, Default)]
pub(super) struct View {
    /// Nodes and bound pods.
    pub(super) cache: Cache,
    /// The unscheduled pods the watch holds: a pod whose attempt fails after it left is not
    /// handed back.
    pub(super) pending: HashSet<String>,
}

/// One term's state: what a cycle and a bind need.
#[derive(Clone)]
pub(super) struct Term {
    pub(super) client: Client,
    pub(super) queue: PodQueue,
    pub(super) view: Arc<Mutex<View>>,
    pub(super) report: Arc<ReportHandle>,
    pub(super) leadership: Leadership,
}

/// The report, shared by a scheduler's terms.
#[derive(Debug)]
pub(super) struct ReportHandle(Arc<Shared>);

// ===== impl Scheduler =====

impl Scheduler {
    /// A replica on `client` with `config`; nothing runs until [`run`](Self::run).
    ///
    /// # Errors
    ///
    /// [`Error`] when the queue's or the election's settings are inconsistent.
    pub fn new(client: Client, config: SchedulerConfig) -> Result<Self, Error> {
        pod_queue(config.queue).map_err(Error::Queue)?;
        let lock = LeaseLock::new(
            client.clone(),
            &config.lease_namespace,
            &config.lease_name,
            &config.identity,
        );
        let elector = LeaderElector::new(lock, config.election.clone()).map_err(Error::Election)?;
        Ok(Scheduler {
            client,
            config,
            elector,
            shared: Arc::default(),
        })
    }

    /// Stands for election until `stop` fires and schedules while leading; returns the number
    /// of terms led. Each term starts from a fresh list of the nodes and pods, and ends (its
    /// watches and its queue with it) when the lease is lost or `stop` fires: on a stop, the
    /// binds in flight finish first; on a loss, they are cancelled.
    pub async fn run(&self, stop: CancellationToken) -> u64 {
        self.elector
            .run_until_cancelled(stop, |leadership| self.term(leadership))
            .await
    }

    /// What it did so far.
    pub fn report(&self) -> Report {
        lock(&self.shared.report).clone()
    }

    /// The queue of the current or last term (`None` before the first): for inspection.
    pub fn queue(&self) -> Option<PodQueue> {
        lock(&self.shared.queue).clone()
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.elector.is_leader()
    }

    /// One term: watch, wait for the first lists, then pop and schedule until it ends.
    async fn term(&self, leadership: Leadership) {
        let Ok(queue) = pod_queue(self.config.queue) else {
            return; // `new` checked the settings
        };
        lock(&self.shared.report).terms += 1;
        *lock(&self.shared.queue) = Some(queue.clone());
        let term = Term {
            client: self.client.clone(),
            queue: queue.clone(),
            view: Arc::default(),
            report: Arc::new(ReportHandle(self.shared.clone())),
            leadership,
        };
        let (synced, mut ready) = watch::channel(false);
        let informers = Informers::new(term.clone(), &self.config);
        let scheduling = async {
            // Nothing is scheduled before the nodes and the bound pods are listed: a cycle on
            // a partial view could overfill a node.
            tokio::select! {
                synced = ready.wait_for(|r| *r) => if synced.is_err() { return },
                () = term.leadership.token().cancelled() => return,
            }
            self.schedule(&term).await;
        };
        // The watches never end; the scheduling ends with the term (after its drain).
        tokio::select! {
            () = informers.run(synced) => {}
            () = scheduling => {}
        }
        queue.shut_down();
    }

    /// Pops and runs one cycle per pod until the term ends; then lets the binds in flight
    /// finish (on a stop request) or cancels them (on a loss).
    async fn schedule(&self, term: &Term) {
        let permits = Arc::new(Semaphore::new(self.config.parallel_binds.max(1)));
        let mut writes = JoinSet::new();
        let token = term.leadership.token();
        loop {
            let popped = tokio::select! {
                biased;
                () = token.cancelled() => break,
                popped = term.queue.pop() => popped,
            };
            let Some(pod) = popped else { break };
            while writes.try_join_next().is_some() {}
            term.cycle(pod, &permits, &mut writes);
        }
        if term.leadership.end_reason() == Some(LeadershipEnd::StopRequested) {
            while writes.join_next().await.is_some() {}
        }
    }
}

// ===== impl SchedulerConfig =====

impl SchedulerConfig {
    /// Schedules the pods naming `scheduler_name`, as replica `identity` on the Lease
    /// `kube-system/<scheduler_name>`, with kube-scheduler's queue settings and client-go's
    /// election timing.
    pub fn new(scheduler_name: impl Into<String>, identity: impl Into<String>) -> Self {
        let scheduler_name = scheduler_name.into();
        SchedulerConfig {
            lease_name: scheduler_name.clone(),
            scheduler_name,
            identity: identity.into(),
            lease_namespace: "kube-system".into(),
            queue: SchedulingQueueConfig::default(),
            election: LeaderElectionConfig::default().release_on_cancel(true),
            parallel_binds: 16,
            node_selector: None,
        }
    }

    /// The Lease's namespace and name.
    #[must_use]
    pub fn lease(mut self, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        self.lease_namespace = namespace.into();
        self.lease_name = name.into();
        self
    }

    /// The queue's settings.
    #[must_use]
    pub fn queue(mut self, queue: SchedulingQueueConfig) -> Self {
        self.queue = queue;
        self
    }

    /// The election's settings.
    #[must_use]
    pub fn election(mut self, election: LeaderElectionConfig) -> Self {
        self.election = election;
        self
    }

    /// Places pods only on the Nodes matching the label `selector` (`pool=batch`): a secondary
    /// scheduler for a pool of nodes.
    #[must_use]
    pub fn nodes(mut self, selector: impl Into<String>) -> Self {
        self.node_selector = Some(selector.into());
        self
    }

    /// How many binds may be in flight at once (at least one).
    #[must_use]
    pub fn parallel_binds(mut self, n: usize) -> Self {
        self.parallel_binds = n;
        self
    }
}

// ===== impl Term =====

impl Term {
    /// One scheduling cycle: skip a pod already bound, pick a node and assume the pod there,
    /// then bind in the background; or hand the pod back as unschedulable and say why.
    fn cycle(
        &self,
        mut pod: Popped<String, PodInfo>,
        permits: &Arc<Semaphore>,
        writes: &mut JoinSet<()>,
    ) {
        let queued_for = Instant::now().saturating_duration_since(pod.timestamp());
        let key = pod.key().clone();
        let mut view = lock(&self.view);
        if view.cache.has_pod(&key) {
            // Bound by this term already; the watch has not caught up yet.
            drop(pod.done());
            return;
        }
        match view.cache.pick(&pod.data().requests) {
            Ok(node) => {
                view.cache.assume(&key, &node, pod.data().requests);
                drop(view);
                let bind = self.clone().bind(pod, node, queued_for, permits.clone());
                writes.spawn(bind);
            }
            Err(unfit) => {
                pod.set_rejectors([FIT]);
                let info = pod.data().clone();
                self.hand_back(&view, pod);
                drop(view);
                self.report.with(|r| r.unschedulable += 1);
                writes.spawn(self.clone().mark_unschedulable(info, unfit.to_string()));
            }
        }
    }

    /// Hands `pod` back to the queue, unless its watch no longer holds it (deleted, or bound
    /// by someone else): then its flight just ends. Called under the view's lock, so a delete
    /// cannot slip between the check and the hand-back.
    pub(super) fn hand_back(&self, view: &View, pod: Popped<String, PodInfo>) {
        if !view.pending.contains(pod.key()) {
            drop(pod.done());
            return;
        }
        let cycle = pod.cycle();
        // A copy queued meanwhile (the pod was updated) is newer: keep it.
        let _ = self.queue.add_unschedulable_if_not_present(pod, cycle);
    }
}

// ===== impl ReportHandle =====

impl ReportHandle {
    /// Changes the report.
    pub(super) fn with(&self, change: impl FnOnce(&mut Report)) {
        change(&mut lock(&self.0.report));
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .field("elector", &self.elector)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("queue", &self.queue)
            .field("fencing_token", &self.leadership.fencing_token())
            .finish_non_exhaustive()
    }
}

/// Locks `mutex`, also after a panic elsewhere (every change to what it guards is one step).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
