//! [`Controller`]: sources of keys, a reconcile function and an optional lease, run as workers.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{LeaderElector, Lock};
use ctrlq_queue_async::metrics::MetricsProvider;
use ctrlq_ratelimit::RateLimiter;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use crate::key::Key;
use crate::lead::{Run, Terms};
use crate::priority::{DEFAULT_AGING, Queued};
use crate::shard::{ShardKey, Sharding};
use crate::source::{Source, Subscribe, pump_all};
use crate::term::{Deadlines, Hook, Policy, Reconciler, StartWorker, TermEnd, TermSettings};
use crate::warm::WarmView;
use crate::{Action, Context, Drain, Event, InBackoff, NotSynced, ReconcileError, Summary};

/// How long in-flight reconciles may run after a shutdown request: controller-runtime's default
/// graceful shutdown timeout.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// How long a run waits for its watches' initial lists by default: controller-runtime's
/// `CacheSyncTimeout`, 2 minutes.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits (at most the given bound) until a source delivered its initial list.
pub(crate) type SyncGate =
    Box<dyn FnOnce(Duration) -> BoxFuture<'static, Result<(), NotSynced>> + Send>;

/// A controller: keys from one or more sources go through a work queue to `workers` concurrent
/// reconciles, each key's outcome ([`Action`]) decides when it comes back.
///
/// - **The queue's rules hold**: a key is never reconciled twice at once, and a key added while
///   it is reconciled is reconciled again afterwards.
/// - **Failures**: an `Err` or a panic in reconcile goes to the error policy (by default a
///   rate-limited requeue with [`ctrlq_ratelimit::default_controller_rate_limiter`]); a panic is
///   caught and counted, the key is kept.
/// - **Terms**: without an elector the controller runs one term until shutdown. With one,
///   workers run only while leading, and each term has a fresh work queue. On a lost lease the
///   term ends at once: in-flight reconciles are dropped, the queue with them, and the
///   controller stands for election again.
/// - **Warm standby** (with an elector or sharded; on by default, see
///   [`warm_standby`](Self::warm_standby)): the sources are subscribed once per run, leading or
///   not, and every key they yield is kept in the replica's warm view. A follower only keeps
///   the keys: it reconciles nothing and writes nothing. When a term begins, its queue is filled
///   from the view at once ([`Event::WarmStart`](crate::Event::WarmStart)), without subscribing
///   again, and the sources' later keys go to the term's queue as they come (and into the view).
///   So a new leader's first reconcile follows its election at once
///   ([`Event::FirstReconcile`](crate::Event::FirstReconcile)), with no listing in between.
/// - **Shutdown**: when `shutdown` fires, workers stop taking keys, the [`Context`] tokens fire,
///   in-flight reconciles get the grace period to finish (while leading, the elector keeps the
///   lease until they have), and [`run`](Self::run) returns a [`Summary`](crate::Summary).
/// - **Reconciles that never await**: after a reconcile that finished without ever awaiting
///   something pending, its worker gives the thread back before taking the next key, so the
///   elector on the same runtime renews (or stops) and a drain's grace period ends between two
///   such reconciles, even when every key is ready at once (a zero-delay requeue loop, a burst
///   of keys). One reconcile that computes for long without awaiting still holds its thread that
///   long: on a current-thread runtime (or when every worker thread is so busy) it delays the
///   renew and the stop by up to its own run time, which must stay below the margin (lease
///   duration − renew deadline − retry period) for the timing budget to hold; run longer work
///   with `tokio::task::spawn_blocking`.
/// - **After a freeze**: a worker starts a reconcile only while the term's lease
///   [is current](ctrlq_leader::Leadership::is_current) on this process's clock (retry period +
///   renew deadline after its last successful renew), so a replica resumed after a freeze
///   (a stopped process, CPU throttling, a paused VM) starts nothing on a lease another replica
///   may hold by then. Reconciles already running when the freeze began resume where they were:
///   guard their writes with the [fencing token](Context::fencing_token).
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::{Arc, Mutex};
/// use ctrlq_controller::{Action, Context, Controller};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let shutdown = CancellationToken::new();
/// let (log, stop) = (seen.clone(), shutdown.clone());
/// let summary = Controller::new("greeter", move |name: String, _ctx: Context| {
///         let (log, stop) = (log.clone(), stop.clone());
///         async move {
///             let mut log = log.lock().unwrap();
///             log.push(name);
///             if log.len() == 3 {
///                 stop.cancel();
///             }
///             Ok::<_, Infallible>(Action::Done)
///         }
///     })
///     .source(|| futures::stream::iter(["a", "b", "c"].map(String::from)))
///     .workers(1)
///     .run(shutdown)
///     .await;
/// assert_eq!(*seen.lock().unwrap(), ["a", "b", "c"]);
/// assert_eq!(summary.reconciles, 3);
/// # }
/// ```
pub struct Controller<K, E> {
    name: String,
    reconcile: Arc<dyn StartWorker<K, E>>,
    policy: Policy<K, E>,
    hooks: Vec<Hook<K>>,
    sources: Vec<Subscribe<K>>,
    /// What must have synced before the run stands for election or reconciles.
    pub(crate) syncs: Vec<SyncGate>,
    sync_timeout: Duration,
    elector: Option<Box<dyn Plan<K, E>>>,
    sharding: Option<Box<dyn Plan<K, E>>>,
    /// With an elector: whether the sources run once per run into a warm view (else once per
    /// term).
    warm: bool,
    settings: TermSettings<K>,
    #[cfg(feature = "prometheus")]
    metrics: Option<Arc<crate::prometheus::ControllerMetrics>>,
    /// The elector's metrics, attached to it at the run.
    #[cfg(feature = "prometheus")]
    leader_metrics: Option<Arc<ctrlq_leader::prometheus::LeaderMetrics>>,
}

impl<K: Key, E: Send + 'static> Controller<K, E> {
    /// A controller named `name` (the `controller` label of its metrics, the queue's `name`)
    /// that reconciles keys with `reconcile`. Add sources with [`source`](Self::source).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_key: String, _ctx: Context| async {
    ///     Ok::<_, std::io::Error>(Action::Done)
    /// });
    /// # let _ = c;
    /// ```
    pub fn new<F, Fut>(name: impl Into<String>, reconcile: F) -> Self
    where
        F: Fn(K, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let name = name.into();
        Self {
            reconcile: Arc::new(reconcile),
            policy: Arc::new(|_, _, _| Action::RequeueRateLimited),
            hooks: Vec::new(),
            sources: Vec::new(),
            syncs: Vec::new(),
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            elector: None,
            sharding: None,
            warm: true,
            settings: TermSettings {
                name: name.clone(),
                workers: 1,
                grace: DEFAULT_GRACE_PERIOD,
                limiter: None,
                queue_metrics: None,
                aging: DEFAULT_AGING,
                in_backoff: InBackoff::RunNow,
                deadlines: Deadlines::default(),
            },
            #[cfg(feature = "prometheus")]
            metrics: None,
            #[cfg(feature = "prometheus")]
            leader_metrics: None,
            name,
        }
    }

    /// Adds a source: a function returning a stream of keys, each at
    /// [`NORMAL`](crate::priority::NORMAL) priority, or of [`Queued`] keys, each at its own
    /// (see [`priority`](crate::priority)). With a warm standby (the default
    /// with an elector or sharded; see [`warm_standby`](Self::warm_standby)) `subscribe` is
    /// called once per run, and the stream's keys are kept in the warm view and added to the
    /// running term's queue; otherwise it is called at the start of every term and the stream's
    /// keys are added to that term's queue. The stream should begin with every key that
    /// currently needs reconciling (a watch's initial list does): what the streams yield is all
    /// a term's queue is filled with. Several sources are merged. The keys a stream has ready at
    /// once (a relist, a burst of events; up to 64) are added together: with one `add_all` to a
    /// term's queue, or into the warm view under one hold of its lock.
    ///
    /// Every key a stream yields is queued, whatever it does next. A stream that panics (or a
    /// `subscribe` that panics) is reported ([`Event::SourceFailed`](crate::Event::SourceFailed),
    /// a `warn!`, the summary's `source_failures`) and subscribed again after a backoff: 1 s,
    /// doubling at each failure in a row up to 30 s, whether this replica leads or follows. A
    /// stream that ends is done (for the run, or for the term with a cold standby); with a warm
    /// standby its keys stay in the view. For a stream of `Result`s,
    /// whose errors should be reported rather than end it, use [`try_source`](Self::try_source).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_key: u32, _ctx: Context| async {
    ///         Ok::<_, std::io::Error>(Action::Done)
    ///     })
    ///     .source(|| futures::stream::iter(0..10))
    ///     .source(|| futures::stream::iter([42]));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn source<F, S>(mut self, mut subscribe: F) -> Self
    where
        F: FnMut() -> S + Send + 'static,
        S: Stream + Send + 'static,
        S::Item: Into<Queued<K>>,
    {
        self.sources
            .push(Box::new(move || subscribe().map(|k| Ok(k.into())).boxed()));
        self
    }

    /// Adds a source whose stream yields `Result`s (a `TryStream`, such as a kube-runtime
    /// watcher's): `Ok` keys are added as with [`source`](Self::source); each `Err` is reported
    /// ([`Event::SourceError`](crate::Event::SourceError), a `warn!`, the summary's `source_errors`) and the stream is
    /// polled on. A stream that ends right after an error failed: it is reported
    /// ([`Event::SourceFailed`](crate::Event::SourceFailed)) and subscribed again after a backoff, as is one that panics.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_key: u32, _ctx: Context| async {
    ///         Ok::<_, std::io::Error>(Action::Done)
    ///     })
    ///     .try_source(|| futures::stream::iter([Ok(1), Err("watch expired"), Ok(2)]));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn try_source<F, S, T, Err>(mut self, mut subscribe: F) -> Self
    where
        F: FnMut() -> S + Send + 'static,
        S: Stream<Item = Result<T, Err>> + Send + 'static,
        T: Into<Queued<K>>,
        Err: fmt::Display + Send + 'static,
    {
        self.sources.push(Box::new(move || {
            subscribe()
                .map(|item| item.map(Into::into).map_err(|e| e.to_string()))
                .boxed()
        }));
        self
    }

    /// Sets the error policy: what to do with a key whose reconcile failed or panicked, given
    /// its failures in a row before this one. By default [`Action::RequeueRateLimited`]. A panic
    /// in the policy itself is caught and taken as [`Action::RequeueRateLimited`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_key: u32, _ctx: Context| async {
    ///         Err::<Action, _>(std::io::Error::other("down"))
    ///     })
    ///     .error_policy(|_key, _err, attempts| {
    ///         if attempts < 5 { Action::RequeueRateLimited } else { Action::requeue_after(Duration::from_secs(600)) }
    ///     });
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn error_policy<F>(mut self, policy: F) -> Self
    where
        F: Fn(&K, &ReconcileError<E>, u32) -> Action + Send + Sync + 'static,
    {
        self.policy = Arc::new(policy);
        self
    }

    /// Sets the number of concurrent reconciles (controller-runtime's `MaxConcurrentReconciles`);
    /// 1 by default, 0 is taken as 1.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .workers(4);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn workers(mut self, n: usize) -> Self {
        self.settings.workers = n.max(1);
        self
    }

    /// Sets how fast queued keys age ([`DEFAULT_AGING`], 600 ms, by default): a key ready for
    /// `d` ranks as if its priority were `priority + d / aging`, so a key queued at
    /// [`LOW`](crate::priority::LOW) waits at most `100 × aging` (60 s by default) behind
    /// [`NORMAL`](crate::priority::NORMAL) keys queued after it. See
    /// [`priority`](crate::priority) for the priorities and why this default. A zero `aging`
    /// is taken as the smallest, 1 ns (first in, first out within 100 ns).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// // Reconciles take seconds: live changes first for the first ten minutes of a list.
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .aging(Duration::from_secs(6));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn aging(mut self, aging: Duration) -> Self {
        self.settings.aging = aging.max(Duration::from_nanos(1));
        self
    }

    /// Sets what a source's key does to a key in failure backoff (waiting for a rate-limited
    /// requeue, or reconciled again after one): [`InBackoff::RunNow`], the default, reconciles
    /// it at once, as client-go and controller-runtime do; [`InBackoff::WaitOut`] lets it wait
    /// out its backoff, reconciled then (from the latest state) at the higher priority. Either
    /// way a key's failure count is reset only by a success ([`Action::Done`],
    /// [`Action::RequeueAfter`], [`Action::Requeue`]), never by a key from a source.
    ///
    /// The default runs it now because a change is new information that may fix the failure
    /// (a Secret created, a quota raised) and should not wait for a backoff that may have
    /// grown to minutes. Choose `WaitOut` for a controller whose failing reconciles cause
    /// changes of their own (a status written, children updated): with `RunNow` each such
    /// change retries at once and charges the limiter, which reaches its longest delay within
    /// seconds (kubernetes/kubernetes#112325).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// use ctrlq_controller::InBackoff;
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .in_backoff(InBackoff::WaitOut);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn in_backoff(mut self, in_backoff: InBackoff) -> Self {
        self.settings.in_backoff = in_backoff;
        self
    }

    /// Sets a soft deadline for each reconcile, from its start: when it passes, the
    /// reconcile's [`Context::token`] fires and [`Context::deadline_passed`] turns true, so the
    /// reconcile can stop where it chooses. A reconcile still running when it ends (with no
    /// [hard deadline](Self::hard_deadline)) is reported:
    /// [`Event::ReconcileOverran`](crate::Event::ReconcileOverran), the summary's `overruns`.
    /// None by default.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .soft_deadline(Duration::from_secs(30))
    ///     .hard_deadline(Duration::from_secs(60));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn soft_deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadlines.soft = Some(deadline);
        self
    }

    /// Sets a hard deadline for each reconcile, from its start: when it passes, the
    /// reconcile's future is dropped (at the `.await` it waits in), the error policy is told
    /// ([`ReconcileError::TimedOut`](crate::ReconcileError::TimedOut); by default the key is
    /// requeued rate limited), and it is counted
    /// ([`ReconcileOutcome::TimedOut`](crate::ReconcileOutcome::TimedOut), the summary's
    /// `timeouts`, `controller_runtime_reconcile_timeouts_total`). A reconcile that computes
    /// without awaiting cannot be dropped before it awaits: it runs to its end and is reported
    /// as an overrun ([`Event::ReconcileOverran`](crate::Event::ReconcileOverran)). None by
    /// default (controller-runtime's `ReconciliationTimeout` only cancels a context the
    /// reconciler may ignore; kube-runtime has none).
    ///
    /// # Examples
    ///
    /// See [`soft_deadline`](Self::soft_deadline).
    #[must_use]
    pub fn hard_deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadlines.hard = Some(deadline);
        self
    }

    /// Sets the limiter behind rate-limited requeues, shared by all terms. By default each term's
    /// queue has a fresh [`ctrlq_ratelimit::default_controller_rate_limiter`]. Any limiter, owned
    /// or shared: pass an `Arc` (of a limiter type or of `dyn RateLimiter<K>`) to keep a handle.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .rate_limiter(ctrlq_ratelimit::default_item_based_rate_limiter());
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.settings.limiter = Some(Arc::new(limiter));
        self
    }

    /// Runs the workers only while `elector` leads (an elector, or an `Arc` of one shared with
    /// a health check). The elector should be configured to release on cancel, so a successor
    /// need not wait out the lease after a shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// let store = MemoryStore::new();
    /// let elector = LeaderElector::new(store.lock("replica-a"), LeaderElectionConfig::default()).unwrap();
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .leader_elector(elector);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn leader_elector<L: Lock>(mut self, elector: impl Into<Arc<LeaderElector<L>>>) -> Self {
        self.elector = Some(Box::new(elector.into()));
        self
    }

    /// Sets whether a replica keeps a warm view of its sources while it follows; `true` by
    /// default. Applies with a [`leader_elector`](Self::leader_elector); a
    /// [`sharded`](Self::sharded) controller always keeps one (its sources run once per replica
    /// anyway), and without either there is one term and nothing to keep warm.
    ///
    /// **Warm** (`true`): the sources are subscribed once per run, and every key they yield is
    /// kept in the replica's warm view, leading or following. A term's queue starts with every
    /// key in the view ([`Event::WarmStart`](crate::Event::WarmStart)), so a failover costs the
    /// election alone: no listing against the API server before the first reconcile. A follower
    /// reconciles nothing and writes nothing; its failing source is reported and subscribed
    /// again after the backoff, as a leader's is. The view holds each distinct key once for the
    /// run: `size_of::<K>()` + 1 bytes times 8/7 to 16/7 (a hash set's spare capacity), plus
    /// what the key owns on the heap (a `String`'s text); each follower also holds its sources'
    /// watches open.
    ///
    /// A deleted object's key stays in the view for the run: the view grows with every key the
    /// sources yielded since the replica started, not with the objects that exist now, and a
    /// term starts with the deleted keys too, reconciling each once more (the reconcile finds the
    /// object gone). A source yields a deletion as a key like any other, and the view is what a
    /// follower holds, which reconciles nothing, so neither tells it that a key is gone. Where
    /// the keys of deleted objects come to outnumber the live ones, restart the replicas in turn
    /// (each starts with a fresh view) or run cold.
    ///
    /// **Cold** (`false`): a follower runs no source; each term subscribes the sources anew and
    /// their listing fills its queue, as a watch is re-listed.
    ///
    /// On by default because a failover is when a controller is needed at once (the keys that
    /// changed while the leader died are waiting), and a listing of every object then, against
    /// an API server that may be what failed, is the slowest part of it. Turn it off when a
    /// watch per follower costs more than a cold start.
    ///
    /// # Examples
    ///
    /// Two replicas; the follower's view fills the term it leads after the leader stops, without
    /// a second subscription.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use ctrlq_controller::{Action, Context, Controller, Event};
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let subscriptions = Arc::new(AtomicUsize::new(0));
    /// let warm_starts = Arc::new(AtomicUsize::new(0));
    /// let replica = |id: &str| {
    ///     let config = LeaderElectionConfig::default().release_on_cancel(true);
    ///     let elector = Arc::new(LeaderElector::new(store.lock(id), config).unwrap());
    ///     let (subs, starts) = (subscriptions.clone(), warm_starts.clone());
    ///     Controller::new("objects", |_key: u32, _ctx: Context| async {
    ///         Ok::<_, std::io::Error>(Action::Done)
    ///     })
    ///     .source(move || {
    ///         subs.fetch_add(1, Ordering::SeqCst);
    ///         futures::stream::iter(0..100).chain(futures::stream::pending())
    ///     })
    ///     .warm_standby(true)
    ///     .leader_elector(elector)
    ///     .on_event(move |e| if let Event::WarmStart { keys, .. } = e {
    ///         starts.fetch_add(*keys, Ordering::SeqCst);
    ///     })
    /// };
    /// # use futures::StreamExt;
    /// let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    /// let a = tokio::spawn(replica("a").run(stop_a.clone()));
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    /// let b = tokio::spawn(replica("b").run(stop_b.clone()));
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    /// stop_a.cancel(); // a drains and releases; b leads, its queue filled from its view
    /// assert_eq!(a.await.unwrap().reconciles, 100);
    /// tokio::time::sleep(Duration::from_secs(10)).await;
    /// stop_b.cancel();
    /// assert_eq!(b.await.unwrap().reconciles, 100);
    /// assert_eq!(warm_starts.load(Ordering::SeqCst), 100, "b's term began with every key");
    /// assert_eq!(subscriptions.load(Ordering::SeqCst), 2, "once per replica");
    /// # }
    /// ```
    #[must_use]
    pub fn warm_standby(mut self, warm: bool) -> Self {
        self.warm = warm;
        self
    }

    /// Splits the keys into shards held through leases, spread over the live replicas (see
    /// [`shard`](crate::shard) for how): this replica runs a term for each shard it holds, and
    /// its sources' keys go to the terms of their shards. Takes the place of
    /// [`leader_elector`](Self::leader_elector) (which is ignored with it). A
    /// [`Watch::for_shards`](crate::kube::Watch::for_shards) built on `sharding` (feature
    /// `kube`) watches only the shards this replica holds, each listed before its term
    /// reconciles; on any other `Watch`, every replica watches everything.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// use ctrlq_controller::shard::Sharding;
    /// use ctrlq_leader::{LeaderElectionConfig, MemoryStore};
    /// let store = MemoryStore::new();
    /// let sharding = Sharding::new(8, "replica-a", move |name: &str| store.named_lock(name, "replica-a"),
    ///     LeaderElectionConfig::default()).unwrap();
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .sharded(sharding);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn sharded<L: Lock>(mut self, sharding: Sharding<L>) -> Self
    where
        K: ShardKey,
    {
        self.sharding = Some(Box::new(sharding));
        self
    }

    /// Sets how long in-flight reconciles may run after a shutdown request before they are
    /// dropped; [`DEFAULT_GRACE_PERIOD`] (30 s) by default.
    ///
    /// With an elector there are two grace periods, and **the drain ends at the shorter one**:
    /// this one, and the elector's (`LeaderElectionConfig::grace_period`, also 30 s by default),
    /// after which the elector stops renewing so that another replica may lead once the lease
    /// expires; the reconciles still in flight then are dropped ([`Drain::CutShort`](crate::Drain::CutShort)). The drain
    /// also ends at a lost lease. So when raising this one, raise the elector's to at least as
    /// much.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .grace_period(Duration::from_secs(10));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.settings.grace = grace;
        self
    }

    /// Sets how long [`run`](Self::run) waits, before it stands for election or reconciles
    /// anything, for the initial list of every watch its sources come from (with the `kube`
    /// feature: the watches given to `Controller::for_watch`, `owns` and `watches`); default
    /// [`DEFAULT_SYNC_TIMEOUT`], 2 minutes. When one has
    /// not synced by then, `run` returns at once with [`Summary::not_synced`] naming it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .sync_timeout(Duration::from_secs(300));
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// Calls `hook` at every [`Event`] as it happens (terms, reconciles, drains), after the hooks
    /// added before it. A hook runs on the worker or the runner, so it must be quick and must not
    /// panic.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller, Event};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .on_event(|e| if let Event::LeadershipLost { aborted } = e { eprintln!("lost, {aborted} dropped") });
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn on_event<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Event<'_, K>) + Send + Sync + 'static,
    {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Reports the work queue's metrics through `provider`, under the controller's name. For
    /// the series a controller-runtime operator writes (labels `controller` and `name`, its help
    /// texts and buckets), give it `QueueMetrics::register_controller_runtime` of
    /// `ctrlq_queue_async::prometheus` (feature `prometheus`; see the module `prometheus`);
    /// `QueueMetrics::register` writes them as Kubernetes components do.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let provider = Arc::new(ctrlq_queue_async::metrics::NoopProvider);
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .queue_metrics(provider);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn queue_metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.settings.queue_metrics = Some(provider);
        self
    }

    /// Reports controller-runtime's reconcile metrics to `metrics` under the controller's name.
    ///
    /// See [`prometheus`](crate::prometheus) for an example.
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<crate::prometheus::ControllerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Wires `metrics` (one [`Metrics`](crate::prometheus::Metrics) per registry, shared by
    /// the process's controllers) in one call: the reconcile families
    /// ([`metrics`](Self::metrics)), the queue's as controller-runtime writes them
    /// ([`queue_metrics`](Self::queue_metrics)), and the elector's, when the run has one
    /// ([`LeaderElector::attach_metrics`](ctrlq_leader::LeaderElector::attach_metrics); an
    /// elector that reports already keeps its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::prometheus::Metrics;
    /// use ctrlq_controller::{Action, Context, Controller};
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// let metrics = Metrics::register(&mut registry);
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .prometheus(&metrics);
    /// # let _ = c;
    /// ```
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    #[must_use]
    pub fn prometheus(mut self, metrics: &crate::prometheus::Metrics) -> Self {
        self.leader_metrics = Some(metrics.leader.clone());
        self.metrics(metrics.controller.clone())
            .queue_metrics(metrics.queue.clone())
    }

    /// Runs until `shutdown` fires, then drains and returns what was done.
    ///
    /// With an elector: stands for election, runs a term while leading, and after a lost lease
    /// stands again; `shutdown` is also the elector's cancel, so it releases the lease after the
    /// drain if configured to.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the workers with their in-flight reconciles and the term's
    /// queue, without a drain; with an elector, the lease is not released and expires.
    pub async fn run(self, shutdown: CancellationToken) -> Summary {
        let Self {
            name,
            reconcile,
            policy,
            hooks,
            sources,
            syncs,
            sync_timeout,
            elector,
            sharding,
            warm,
            settings,
            #[cfg(feature = "prometheus")]
            metrics,
            #[cfg(feature = "prometheus")]
            leader_metrics,
        } = self;
        #[cfg(feature = "prometheus")]
        if let (Some(plan), Some(m)) = (&elector, leader_metrics) {
            plan.attach_leader_metrics(m);
        }
        // Start after sync: every watch's initial list first, as controller-runtime waits for
        // its caches, so that no reconcile reads a store that has not listed yet. The watches
        // list at once, under one bound.
        let gates = futures::future::join_all(syncs.into_iter().map(|gate| gate(sync_timeout)));
        match shutdown.run_until_cancelled(gates).await {
            None => return Summary::default(),
            Some(synced) => {
                if let Some(Err(not_synced)) = synced.into_iter().find(Result::is_err) {
                    warn!(controller = %name, %not_synced, "a source did not sync; not starting");
                    return Summary {
                        not_synced: Some(not_synced),
                        ..Summary::default()
                    };
                }
            }
        }
        // The metrics are a hook after the user's.
        #[cfg(feature = "prometheus")]
        let hooks = {
            let mut hooks = hooks;
            if let Some(metrics) = metrics {
                let (name, workers) = (name.clone(), settings.workers);
                hooks.push(Arc::new(move |e| metrics.record(&name, workers, e)));
            }
            hooks
        };
        let shared = Arc::new(Reconciler {
            reconcile,
            policy,
            hooks,
            stats: Default::default(),
        });
        let sources: Vec<_> = sources
            .into_iter()
            .enumerate()
            .map(|(i, subscribe)| Arc::new(Source::new(i, subscribe)))
            .collect();
        let span = debug_span!("controller", controller = %name);
        let drain = match sharding.or(elector) {
            Some(plan) => {
                let run = Run {
                    name: &name,
                    settings: &settings,
                    shared: &shared,
                    sources: &sources,
                    warm,
                    shutdown: &shutdown,
                };
                plan.run(run).instrument(span).await
            }
            None => {
                let feed = |queue: &_| pump_all(&sources, queue, &shared);
                let term = settings.term(&shared, feed, None, None, &shutdown);
                let end = term.instrument(span).await;
                Drain::ran(matches!(end, TermEnd::Drained { finished: true }))
            }
        };
        shared.stats.summary(drain)
    }
}

/// How a run leads, under one elector or as shards, with the lock type erased so that a
/// [`Controller`] is generic over its keys and errors only. Runs until the shutdown and
/// returns how the drains went.
trait Plan<K, E>: Send {
    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain>;

    /// Reports the election to `metrics` (a single elector; sharded leases report through the
    /// controller's shard gauges).
    #[cfg(feature = "prometheus")]
    fn attach_leader_metrics(&self, metrics: Arc<ctrlq_leader::prometheus::LeaderMetrics>) {
        let _ = metrics;
    }
}

impl<K: Key + ShardKey, E: Send + 'static, L: Lock> Plan<K, E> for Sharding<L> {
    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain> {
        crate::shard::run::run(*self, run).boxed()
    }
}

impl<K: Key, E: Send + 'static, L: Lock> Plan<K, E> for Arc<LeaderElector<L>> {
    #[cfg(feature = "prometheus")]
    fn attach_leader_metrics(&self, metrics: Arc<ctrlq_leader::prometheus::LeaderMetrics>) {
        self.attach_metrics(metrics);
    }

    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain> {
        async move {
            // A warm standby: the sources run for the whole run, into the view.
            let view = Arc::new(WarmView::new(None));
            let _pumps = run.warm.then(|| pump_all(run.sources, &view, run.shared));
            let terms = Terms {
                settings: run.settings,
                shared: run.shared,
                view: &view,
                cold: (!run.warm).then_some(run.sources),
                drain: Mutex::new(Drain::NotLeading),
            };
            let terms = &terms;
            let shutdown = run.shutdown;
            self.run_until_cancelled(shutdown.clone(), |leadership| {
                let status = self.subscribe_status();
                async move {
                    let end = terms.lead(leadership, status, None, shutdown).await;
                    if matches!(end, TermEnd::Lost) {
                        debug!("lease lost; standing for election again");
                    }
                }
            })
            .await;
            *terms.drain.lock()
        }
        .boxed()
    }
}

impl<K, E> fmt::Debug for Controller<K, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("sources", &self.sources.len())
            .field("workers", &self.settings.workers)
            .field("grace_period", &self.settings.grace)
            .field("leader_elector", &self.elector.is_some())
            .field("sharded", &self.sharding.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_name_and_the_settings() {
        let c = Controller::new("pods", |_k: u32, _c: Context| async {
            Ok::<_, std::io::Error>(Action::Done)
        })
        .source(|| futures::stream::iter([1u32]))
        .workers(3)
        .grace_period(Duration::from_secs(7));
        assert_eq!(
            format!("{c:?}"),
            "Controller { name: \"pods\", sources: 1, workers: 3, grace_period: 7s, \
             leader_elector: false, sharded: false, .. }"
        );
    }
}
