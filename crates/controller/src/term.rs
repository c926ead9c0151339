//! One term: a fresh queue, the sources pumping into it, the workers taking from it, and how it
//! ends (drain on shutdown, drop on a lost lease).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use ctrlq_leader::{Leadership, LeadershipEnd};
use ctrlq_queue_async::WorkQueue;
use ctrlq_queue_async::metrics::MetricsProvider;
use ctrlq_ratelimit::RateLimiter;
use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Level, debug, debug_span};

use crate::action::panic_message;
use crate::controller::{Hook, Key, Policy, StartWorker, apply};
use crate::event::ReconcileOutcome;
use crate::shard::Router;
use crate::source::Source;
use crate::stats::{Counts, Outcome, Recorder, WorkerSlot};
use crate::{Action, Context, Event, ReconcileError};

/// What every term is built from.
pub(crate) struct TermSettings<K> {
    pub(crate) name: String,
    pub(crate) workers: usize,
    pub(crate) grace: Duration,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
    pub(crate) queue_metrics: Option<Arc<dyn MetricsProvider>>,
}

/// The reconcile function with what surrounds each call (the error policy, the event hooks,
/// the recorder): what the workers of every term share.
pub(crate) struct Reconciler<K, E> {
    pub(crate) reconcile: Arc<dyn StartWorker<K, E>>,
    pub(crate) policy: Policy<K, E>,
    pub(crate) hooks: Vec<Hook<K>>,
    pub(crate) recorder: Recorder,
}

/// How a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TermEnd {
    /// Shutdown requested; `finished` if the in-flight reconciles ended within the grace period.
    Drained { finished: bool },
    /// The lease was lost.
    Lost,
}

impl TermEnd {
    pub(crate) fn drained(self) -> bool {
        matches!(self, Self::Drained { finished: true })
    }
}

/// Where a term's keys come from.
pub(crate) enum Feed<'a, K: Key> {
    /// The controller's sources, subscribed for this term.
    Sources(&'a [Arc<Source<K>>]),
    /// One shard of a sharded replica: its router sends the shard's keys to the term's queue
    /// while the term runs (the term detaches it when it ends).
    Shard(u32, &'a Router<K>),
}

impl<K: Key> Clone for Feed<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key> Copy for Feed<'_, K> {}

/// One term's queue and tokens, shared by its workers.
pub(crate) struct Term<K: Key, E> {
    shared: Arc<Reconciler<K, E>>,
    queue: WorkQueue<K>,
    /// Workers stop taking keys: `stopping` is set first and read after each `get`; then the
    /// queue is shut down, which wakes the workers waiting in `get`.
    stopping: AtomicBool,
    /// The reconciles' [`Context::token`].
    ctx_token: CancellationToken,
    fencing: Option<u64>,
    /// With the queue's own rate limiter, which nothing but this term's workers charge or
    /// forget: how many keys have failures on record in it. While none has, every key's
    /// attempts are 0 and the limiter is not asked. A limiter given with
    /// [`Controller::rate_limiter`](crate::Controller::rate_limiter) is shared by all terms
    /// and may be charged elsewhere, so it is always asked.
    failing: Option<AtomicU64>,
    /// One per worker.
    workers: Box<[WorkerSlot]>,
}

impl<K: Key> TermSettings<K> {
    /// Runs one term until `shutdown` fires or `leadership` ends.
    pub(crate) async fn term<E: Send + 'static>(
        &self,
        shared: &Arc<Reconciler<K, E>>,
        feed: Feed<'_, K>,
        leadership: Option<(Leadership, watch::Receiver<bool>)>,
        shutdown: &CancellationToken,
    ) -> TermEnd {
        let (leadership, leading) = leadership.unzip();
        let fencing = leadership.as_ref().map(Leadership::fencing_token);
        let (term, mut pumps, mut workers) = self.start(shared, feed, fencing);
        let lost = async {
            match &leadership {
                Some(l) => l.token().cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = lost => {}
        }
        term.ctx_token.cancel();
        term.stopping.store(true, Relaxed);
        // In-flight reconciles may still finish, but what they requeue would go with the queue
        // at the end of the term anyway: the next term's sources bring their keys back.
        term.queue.shut_down();
        if let Feed::Shard(shard, router) = feed {
            router.detach(shard);
        }
        pumps.abort_all();
        // A pump catches its source's panics; what is left to join is its cancellation.
        while pumps.join_next().await.is_some() {}
        let before = shared.recorder.stats.aborted.load(Relaxed);
        let lost = leadership
            .as_ref()
            .and_then(Leadership::end_reason)
            .is_some_and(LeadershipEnd::is_loss);
        let end = if shutdown.is_cancelled() && !lost {
            let finished = self.drain(&term, &mut workers, leading).await;
            TermEnd::Drained { finished }
        } else {
            TermEnd::Lost
        };
        workers.abort_all();
        // Every worker's future is dropped by now, and its counts added.
        join_all(&mut workers).await;
        let aborted = shared.recorder.stats.aborted.load(Relaxed) - before;
        shared.ended(end, aborted);
        end
    }

    /// A fresh queue, the sources pumping into it and the workers taking from it.
    fn start<E: Send + 'static>(
        &self,
        shared: &Arc<Reconciler<K, E>>,
        feed: Feed<'_, K>,
        fencing: Option<u64>,
    ) -> (Arc<Term<K, E>>, JoinSet<()>, JoinSet<()>) {
        shared.recorder.stats.terms.fetch_add(1, Relaxed);
        shared.recorder.workers(self.workers);
        debug!(?fencing, "term started");
        shared.emit(&Event::Leading {
            fencing_token: fencing,
        });
        let term = Arc::new(Term {
            shared: shared.clone(),
            queue: self.queue(),
            stopping: AtomicBool::new(false),
            ctx_token: CancellationToken::new(),
            fencing,
            failing: self.limiter.is_none().then(AtomicU64::default),
            workers: (0..self.workers).map(|_| WorkerSlot::default()).collect(),
        });
        let mut pumps = JoinSet::new();
        match feed {
            Feed::Sources(sources) => {
                for source in sources {
                    let pump = source.clone().pump(term.queue.clone(), shared.clone());
                    pumps.spawn(pump.in_current_span());
                }
            }
            // The replica's pumps route this shard's keys here from now on, and list again.
            Feed::Shard(shard, router) => router.attach(shard, term.queue.clone()),
        }
        let mut workers = JoinSet::new();
        for i in 0..self.workers {
            // Spawned tasks do not inherit the span: carry the controller's into each worker.
            workers.spawn(
                shared
                    .reconcile
                    .clone()
                    .start(term.clone(), i)
                    .in_current_span(),
            );
        }
        (term, pumps, workers)
    }

    /// Lets the in-flight reconciles finish within the grace period; `false` if it ran out or
    /// the elector stopped renewing first (the lease was lost, or its own grace period ran out).
    async fn drain<E: Send + 'static>(
        &self,
        term: &Term<K, E>,
        workers: &mut JoinSet<()>,
        mut leading: Option<watch::Receiver<bool>>,
    ) -> bool {
        let in_flight = term
            .workers
            .iter()
            .filter(|w| w.in_flight.load(Relaxed))
            .count() as u64;
        debug!(in_flight, "draining");
        term.shared.emit(&Event::DrainStarted { in_flight });
        let stopped_leading = async {
            match &mut leading {
                Some(rx) => drop(rx.wait_for(|leading| !*leading).await),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = tokio::time::timeout(self.grace, join_all(workers)) => r.is_ok(),
            () = stopped_leading => {
                debug!("the elector stopped renewing during the drain");
                false
            }
        }
    }

    fn queue(&self) -> WorkQueue<K> {
        let mut b = WorkQueue::builder().name(self.name.clone());
        if let Some(l) = &self.limiter {
            b = b.rate_limiter(l.clone());
        }
        if let (Some(m), false) = (&self.queue_metrics, self.name.is_empty()) {
            b = b.metrics(m.clone());
        }
        b.build()
    }
}

async fn join_all(set: &mut JoinSet<()>) {
    while let Some(r) = set.join_next().await {
        if let Err(e) = r
            && e.is_panic()
        {
            debug!("a worker panicked outside reconcile (in the event hook)");
        }
    }
}

impl<K: Key, E: Send + 'static> Term<K, E> {
    /// One worker: takes keys until the term stops taking them or the queue shuts down.
    pub(crate) async fn work<F, Fut>(self: Arc<Self>, reconcile: Arc<F>, index: usize)
    where
        F: Fn(K, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        // The reconciles' token, shared by this worker's contexts: cloning a
        // `CancellationToken` locks its tree, an `Arc` clone does not.
        let token = Arc::new(self.ctx_token.clone());
        let shared = &*self.shared;
        // What nobody reads is not built: the events without hooks, the reconcile's duration
        // without hooks or metrics (two clock reads are a measurable part of a fast reconcile).
        let hooked = !shared.hooks.is_empty();
        let timed = hooked || shared.recorder.is_timed();
        let slot = &self.workers[index];
        let mut counts = Counts::new(&shared.recorder.stats);
        // The queue alone wakes a waiting worker, at a key or at its shutdown: a stop token in
        // a `select!` next to `get` would cost every key a poll of it and a copy of both futures.
        while let Some(item) = self.queue.get().await {
            // A key taken after the stop is dropped unstarted: the term's queue goes with the
            // term.
            if self.stopping.load(Relaxed) {
                return;
            }
            // The reconcile is awaited here rather than in a helper `async fn`: the helper's
            // future, holding the item and the guard, would be built and copied into this one
            // at every key.
            let key = item.key();
            let attempts = self.attempts(key);
            if hooked {
                shared.emit(&Event::ReconcileStarted { key, attempts });
            }
            let mut guard = InFlight::new(&self, slot, key, timed);
            let ctx = Context {
                token: token.clone(),
                attempts,
                fencing: self.fencing,
            };
            let result = match catch_unwind(AssertUnwindSafe(|| reconcile(key.clone(), ctx))) {
                // Instrumented only for an interested subscriber: with tracing's `log` feature
                // on (kube-client turns it on) and no subscriber, a disabled span still records
                // its fields and goes through the `log` fallback at every enter and exit, and
                // even an empty span is entered and left at every poll.
                Ok(fut) if tracing::enabled!(Level::DEBUG) => {
                    let span = debug_span!("reconcile", key = ?key, attempts);
                    AssertUnwindSafe(fut).catch_unwind().instrument(span).await
                }
                Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
                Err(payload) => Err(payload),
            };
            let took = guard.finish();
            let action = match result {
                Ok(Ok(action)) => {
                    counts.successes += 1;
                    if timed {
                        self.report(key, ok_outcome(action), ReconcileOutcome::Ok(action), took);
                    }
                    action
                }
                Ok(Err(e)) => {
                    counts.errors += 1;
                    self.failed(key, attempts, ReconcileError::Failed(e), took)
                }
                Err(payload) => {
                    counts.panics += 1;
                    let msg = panic_message(&*payload);
                    debug!(key = ?key, panic = %msg, "reconcile panicked");
                    self.failed(key, attempts, ReconcileError::Panicked(msg), took)
                }
            };
            drop(guard);
            self.settle(attempts, action);
            apply(&self.queue, item, action);
        }
    }

    /// The key's failures in a row so far.
    fn attempts(&self, key: &K) -> u32 {
        match &self.failing {
            Some(failing) if failing.load(Relaxed) == 0 => 0,
            _ => u32::try_from(self.queue.num_requeues(key)).unwrap_or(u32::MAX),
        }
    }

    /// Keeps [`failing`](Self::failing) up to date with what `action` is about to do to a key
    /// that had `attempts` failures on record. Done before the action: the key is handed out
    /// again only after it, so whoever takes it next reads a count that includes it.
    fn settle(&self, attempts: u32, action: Action) {
        if let Some(failing) = &self.failing {
            match (action, attempts) {
                (Action::RequeueRateLimited, 0) => {
                    failing.fetch_add(1, Relaxed);
                }
                (Action::Done | Action::RequeueAfter(_), 1..) => {
                    failing.fetch_sub(1, Relaxed);
                }
                _ => {}
            }
        }
    }

    /// Asks the error policy what to do with the key of a failed reconcile, and reports it.
    fn failed(&self, key: &K, attempts: u32, err: ReconcileError<E>, took: Duration) -> Action {
        let action = self.shared.policy(key, &err, attempts);
        let (outcome, event) = if err.is_panic() {
            (Outcome::Panic, ReconcileOutcome::Panic(action))
        } else {
            (Outcome::Error, ReconcileOutcome::Error(action))
        };
        self.report(key, outcome, event, took);
        action
    }

    /// Records a finished reconcile in the metrics and tells the hooks.
    fn report(&self, key: &K, outcome: Outcome, event: ReconcileOutcome, took: Duration) {
        self.shared.recorder.finished(outcome, took);
        self.shared.emit(&Event::ReconcileFinished {
            key,
            outcome: event,
            took,
        });
    }
}

fn ok_outcome(action: Action) -> Outcome {
    match action {
        Action::Done => Outcome::Success,
        Action::RequeueAfter(_) => Outcome::RequeueAfter,
        Action::RequeueRateLimited => Outcome::Requeue,
    }
}

impl<K, E> Reconciler<K, E> {
    /// Counts and reports the end of a term.
    fn ended(&self, end: TermEnd, aborted: u64) {
        match end {
            TermEnd::Drained { .. } => self.emit(&Event::DrainFinished { aborted }),
            TermEnd::Lost => {
                self.recorder.stats.leases_lost.fetch_add(1, Relaxed);
                self.emit(&Event::LeadershipLost { aborted });
            }
        }
        debug!(?end, aborted, "term ended");
    }

    pub(crate) fn emit(&self, event: &Event<'_, K>) {
        for hook in &self.hooks {
            hook(event);
        }
    }

    fn policy(&self, key: &K, err: &ReconcileError<E>, attempts: u32) -> Action {
        catch_unwind(AssertUnwindSafe(|| (self.policy)(key, err, attempts)))
            .unwrap_or(Action::RequeueRateLimited)
    }
}

/// Marks the worker's reconcile in flight; if dropped before [`finish`](Self::finish) (the
/// worker was aborted), records it as aborted.
struct InFlight<'a, K: Key, E> {
    term: &'a Term<K, E>,
    slot: &'a WorkerSlot,
    key: &'a K,
    /// When the reconcile began, if anything reads how long it took.
    start: Option<Instant>,
    armed: bool,
}

impl<'a, K: Key, E> InFlight<'a, K, E> {
    fn new(term: &'a Term<K, E>, slot: &'a WorkerSlot, key: &'a K, timed: bool) -> Self {
        slot.in_flight.store(true, Relaxed);
        term.shared.recorder.active(1);
        Self {
            term,
            slot,
            key,
            start: timed.then(Instant::now),
            armed: true,
        }
    }

    fn finish(&mut self) -> Duration {
        self.armed = false;
        self.slot.in_flight.store(false, Relaxed);
        self.term.shared.recorder.active(-1);
        self.start.map_or(Duration::ZERO, |start| start.elapsed())
    }
}

impl<K: Key, E> Drop for InFlight<'_, K, E> {
    fn drop(&mut self) {
        if self.armed {
            let took = self.finish();
            self.term.shared.recorder.aborted();
            self.term.shared.emit(&Event::ReconcileFinished {
                key: self.key,
                outcome: ReconcileOutcome::Aborted,
                took,
            });
        }
    }
}
