//! One term: a fresh queue, whatever feeds it keys, the workers taking from it, and how it
//! ends (drain on shutdown, drop on a lost lease). What feeds the queue is the caller's: the
//! controller's sources, or the warm view. What every term shares (the reconcile function, the
//! error policy, the hooks, the counters) is the [`Reconciler`]; one worker's loop is
//! `Term::work`.

use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::task::Poll;
use std::time::Duration;

use ctrlq_leader::{ElectorStatus, Leadership, LeadershipEnd};
use ctrlq_queue_async::metrics::MetricsProvider;
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{InBackoff, PriorityQueue};
use ctrlq_ratelimit::RateLimiter;
use futures::FutureExt;
use futures::future::{BoxFuture, Either};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Level, debug, debug_span, warn};

use crate::action::panic_message;
use crate::event::Stats;
use crate::key::Key;
use crate::{Action, Context, Event, ReconcileError, ReconcileOutcome};

/// What every term is built from.
pub(crate) struct TermSettings<K> {
    pub(crate) name: String,
    pub(crate) workers: usize,
    pub(crate) grace: Duration,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
    pub(crate) queue_metrics: Option<Arc<dyn MetricsProvider>>,
    /// The queue's aging interval (see [`crate::priority`]).
    pub(crate) aging: Duration,
    pub(crate) in_backoff: InBackoff,
    pub(crate) deadlines: Deadlines,
}

/// A reconcile's deadlines, from its start.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Deadlines {
    /// The reconcile's context token fires.
    pub(crate) soft: Option<Duration>,
    /// The reconcile is dropped at its next `.await`.
    pub(crate) hard: Option<Duration>,
}

/// How a term ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TermEnd {
    /// Shutdown requested; `finished` if the in-flight reconciles ended within the grace period.
    Drained { finished: bool },
    /// The lease was lost.
    Lost,
}

/// The reconcile function, able to start one worker of a term. Its type is erased here, once
/// per worker started, rather than at each call: the worker loop is compiled for the user's
/// function, so each reconcile's future is awaited inline instead of boxed.
pub(crate) trait StartWorker<K, E>: Send + Sync {
    fn start(self: Arc<Self>, term: Arc<Term<K, E>>) -> BoxFuture<'static, ()>
    where
        K: Key,
        E: Send + 'static;
}

impl<K, E, F, Fut> StartWorker<K, E> for F
where
    F: Fn(K, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    fn start(self: Arc<Self>, term: Arc<Term<K, E>>) -> BoxFuture<'static, ()>
    where
        K: Key,
        E: Send + 'static,
    {
        term.work(self).boxed()
    }
}

pub(crate) type Policy<K, E> = Arc<dyn Fn(&K, &ReconcileError<E>, u32) -> Action + Send + Sync>;
pub(crate) type Hook<K> = Arc<dyn Fn(&Event<'_, K>) + Send + Sync>;

/// The reconcile function with what surrounds each call (the error policy, the event hooks,
/// the counters): what the workers of every term share.
pub(crate) struct Reconciler<K, E> {
    pub(crate) reconcile: Arc<dyn StartWorker<K, E>>,
    pub(crate) policy: Policy<K, E>,
    pub(crate) hooks: Vec<Hook<K>>,
    pub(crate) stats: Stats,
}

/// One term's queue and tokens, shared by its workers.
pub(crate) struct Term<K: Key, E> {
    shared: Arc<Reconciler<K, E>>,
    queue: PriorityQueue<K>,
    deadlines: Deadlines,
    /// Workers stop taking keys: `stopping` is set first and read after each `get`; then the
    /// queue is shut down, which wakes the workers waiting in `get`.
    stopping: AtomicBool,
    /// The reconciles' [`Context::token`].
    ctx_token: CancellationToken,
    fencing: Option<u64>,
    /// The lease this term runs on: no reconcile starts unless it
    /// [is current](Leadership::is_current) on this process's clock.
    grant: Option<Leadership>,
    /// The reconciles running now.
    in_flight: AtomicU64,
    /// When the term began, and the shard its events name: what its first reconcile reports.
    began: Instant,
    shard: Option<u32>,
    /// Set by the worker that starts the term's first reconcile.
    reconciled: AtomicBool,
}

impl<K: Key> TermSettings<K> {
    /// Runs one term until `shutdown` fires or `leadership` ends. `feed` starts filling the
    /// term's fresh queue; the tasks it returns are aborted when the term stops taking keys
    /// (a feed that keeps the queue elsewhere finds it shut down from then on). `shard` is what
    /// the term's events carry as theirs.
    pub(crate) async fn term<E: Send + 'static>(
        &self,
        shared: &Arc<Reconciler<K, E>>,
        feed: impl FnOnce(&PriorityQueue<K>) -> JoinSet<()>,
        leadership: Option<(Leadership, watch::Receiver<ElectorStatus>)>,
        shard: Option<u32>,
        shutdown: &CancellationToken,
    ) -> TermEnd {
        let (leadership, leading) = leadership.unzip();
        let (term, mut pumps, mut workers) = self.start(shared, feed, leadership.clone(), shard);
        // Without a lease, a token that never fires.
        let lost = leadership.as_ref().map(|l| l.token().clone());
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = lost.unwrap_or_default().cancelled_owned() => {}
        }
        term.ctx_token.cancel();
        term.stopping.store(true, Relaxed);
        // In-flight reconciles may still finish, but what they requeue would go with the queue
        // at the end of the term anyway: the next term's queue starts with every key the
        // sources yielded (the warm view), or with their next listing.
        term.queue.shut_down();
        pumps.abort_all();
        // A pump catches its source's panics; what is left to join is its cancellation.
        while pumps.join_next().await.is_some() {}
        let before = shared.stats.aborted.load(Relaxed);
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
        // Every worker's future is dropped by now, and its aborted reconcile counted.
        join_all(&mut workers).await;
        let aborted = shared.stats.aborted.load(Relaxed) - before;
        shared.emit(&match end {
            TermEnd::Drained { .. } => Event::DrainFinished { aborted },
            TermEnd::Lost => Event::LeadershipLost { aborted },
        });
        debug!(?end, aborted, "term ended");
        end
    }

    /// A fresh queue, what feeds it and the workers taking from it.
    fn start<E: Send + 'static>(
        &self,
        shared: &Arc<Reconciler<K, E>>,
        feed: impl FnOnce(&PriorityQueue<K>) -> JoinSet<()>,
        grant: Option<Leadership>,
        shard: Option<u32>,
    ) -> (Arc<Term<K, E>>, JoinSet<()>, JoinSet<()>) {
        let fencing = grant.as_ref().map(Leadership::fencing_token);
        debug!(?fencing, "term started");
        shared.emit(&Event::Leading {
            fencing_token: fencing,
        });
        let mut queue = PriorityQueue::builder()
            .name(self.name.clone())
            .aging(self.aging)
            .in_backoff(self.in_backoff);
        if let Some(l) = &self.limiter {
            queue = queue.rate_limiter(l.clone());
        }
        if let (Some(m), false) = (&self.queue_metrics, self.name.is_empty()) {
            queue = queue.metrics(m.clone());
        }
        let term = Arc::new(Term {
            shared: shared.clone(),
            queue: queue.build(),
            deadlines: self.deadlines,
            stopping: AtomicBool::new(false),
            ctx_token: CancellationToken::new(),
            fencing,
            grant,
            in_flight: AtomicU64::new(0),
            began: Instant::now(),
            shard,
            reconciled: AtomicBool::new(false),
        });
        let pumps = feed(&term.queue);
        let mut workers = JoinSet::new();
        for _ in 0..self.workers {
            // Spawned tasks do not inherit the span: carry the controller's into each worker.
            let worker = shared.reconcile.clone().start(term.clone());
            workers.spawn(worker.in_current_span());
        }
        (term, pumps, workers)
    }

    /// Lets the in-flight reconciles finish within the grace period; `false` if it ran out or
    /// the elector stopped renewing first (the lease was lost, or its own grace period ran out).
    async fn drain<E: Send + 'static>(
        &self,
        term: &Term<K, E>,
        workers: &mut JoinSet<()>,
        mut leading: Option<watch::Receiver<ElectorStatus>>,
    ) -> bool {
        let in_flight = term.in_flight.load(Relaxed);
        debug!(in_flight, "draining");
        term.shared.emit(&Event::DrainStarted { in_flight });
        let stopped_leading = async {
            match &mut leading {
                Some(rx) => drop(rx.wait_for(|status| !status.leading).await),
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
}

impl<K: Key, E: Send + 'static> Term<K, E> {
    /// One worker: takes keys until the term stops taking them or the queue shuts down.
    async fn work<F, Fut>(self: Arc<Self>, reconcile: Arc<F>)
    where
        F: Fn(K, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        // The queue alone wakes a waiting worker, at a key or at its shutdown.
        while let Some(item) = self.queue.get().await {
            // A key taken after the stop is dropped unstarted: the term's queue goes with the
            // term. So is one taken once the lease may have lapsed on this process's clock
            // (after a freeze, before the elector's task has run again), unless a renew that
            // answered in time turns out to hold it.
            // The key's failures are read (under the limiter's lock) before the lease check,
            // so that the check comes as close as it can to the reconcile's start.
            let key = item.key();
            let attempts = u32::try_from(self.queue.num_requeues(key)).unwrap_or(u32::MAX);
            if self.stopping.load(Relaxed) {
                return;
            }
            if let Some(grant) = &self.grant
                && !grant.is_current()
            {
                debug!("lease not current on this clock; waiting for the elector");
                if !grant.current().await || self.stopping.load(Relaxed) {
                    return;
                }
            }
            if !self.reconciled.load(Relaxed) && !self.reconciled.swap(true, Relaxed) {
                let after = self.began.elapsed();
                debug!(?after, shard = self.shard, "first reconcile of the term");
                let shard = self.shard;
                self.shared.emit(&Event::FirstReconcile { shard, after });
            }
            self.shared.emit(&Event::ReconcileStarted { key, attempts });
            self.in_flight.fetch_add(1, Relaxed);
            let started = Instant::now();
            // Reports the reconcile aborted if the worker is dropped before it ends.
            let aborted = Aborted {
                term: &self,
                key,
                started,
            };
            let deadline = self.deadlines.soft.map(|d| started + d);
            // With a soft deadline, each reconcile has a token of its own, which also fires at
            // its deadline.
            let ctx_token = match deadline {
                Some(_) => self.ctx_token.child_token(),
                None => self.ctx_token.clone(),
            };
            let ctx = Context {
                token: ctx_token.clone(),
                attempts,
                fencing: self.fencing,
                deadline,
            };
            // Whether the reconcile ever gave the thread back.
            let mut pended = false;
            let mut soft = deadline.map(|at| Box::pin(tokio::time::sleep_until(at)));
            let hard = self.deadlines.hard.map(|d| started + d);
            let mut hard = hard.map(|at| Box::pin(tokio::time::sleep_until(at)));
            let result = match catch_unwind(AssertUnwindSafe(|| reconcile(key.clone(), ctx))) {
                Ok(fut) => {
                    let fut = AssertUnwindSafe(fut).catch_unwind();
                    // Instrumented only for an interested subscriber: with tracing's `log`
                    // feature on (kube-client turns it on) and no subscriber, a disabled span
                    // still records its fields and goes through the `log` fallback at every
                    // enter and exit.
                    let mut fut = pin!(if tracing::enabled!(Level::DEBUG) {
                        let span = debug_span!("reconcile", key = ?key, attempts);
                        Either::Left(fut.instrument(span))
                    } else {
                        Either::Right(fut)
                    });
                    poll_fn(|cx| {
                        let poll = fut.as_mut().poll(cx);
                        pended |= poll.is_pending();
                        if poll.is_ready() {
                            return poll.map(Finished::Returned);
                        }
                        // The deadlines are read only when the reconcile waits: one that never
                        // awaits runs to its end (reported as an overrun).
                        if let Some(sleep) = &mut soft
                            && sleep.as_mut().poll(cx).is_ready()
                        {
                            ctx_token.cancel();
                            soft = None;
                        }
                        if let Some(sleep) = &mut hard
                            && sleep.as_mut().poll(cx).is_ready()
                        {
                            return Poll::Ready(Finished::TimedOut);
                        }
                        Poll::Pending
                    })
                    .await
                }
                Err(payload) => Finished::Returned(Err(payload)),
            };
            let took = started.elapsed();
            // Disarmed: the reconcile ended.
            std::mem::forget(aborted);
            self.in_flight.fetch_sub(1, Relaxed);
            let (action, outcome) = match result {
                Finished::Returned(Ok(Ok(action))) => (action, ReconcileOutcome::Ok(action)),
                Finished::Returned(Ok(Err(e))) => {
                    let action = self
                        .shared
                        .policy(key, &ReconcileError::Failed(e), attempts);
                    (action, ReconcileOutcome::Error(action))
                }
                Finished::Returned(Err(payload)) => {
                    let msg = panic_message(&*payload);
                    debug!(key = ?key, panic = %msg, "reconcile panicked");
                    let err = ReconcileError::Panicked(msg);
                    let action = self.shared.policy(key, &err, attempts);
                    (action, ReconcileOutcome::Panic(action))
                }
                Finished::TimedOut => {
                    let after = self.deadlines.hard.unwrap_or_default();
                    debug!(key = ?key, ?after, "reconcile dropped at its deadline");
                    let err = ReconcileError::TimedOut(after);
                    let action = self.shared.policy(key, &err, attempts);
                    (action, ReconcileOutcome::TimedOut(action))
                }
            };
            let finished = Event::ReconcileFinished { key, outcome, took };
            self.shared.emit(&finished);
            // A reconcile that ran past a deadline that could not cut it: past the hard one
            // without awaiting in between, or past the soft one with no hard one.
            if let Some(deadline) = self.deadlines.hard.or(self.deadlines.soft)
                && !matches!(outcome, ReconcileOutcome::TimedOut(_))
            {
                let ran = started.elapsed();
                if ran > deadline {
                    warn!(key = ?key, ?ran, ?deadline, "a reconcile ran past its deadline");
                    let overran = Event::ReconcileOverran { key, deadline, ran };
                    self.shared.emit(&overran);
                }
            }
            let requeued = match action {
                Action::Done => {
                    item.forget();
                    Ok(())
                }
                Action::RequeueAfter(delay) => {
                    self.queue.forget(item.key());
                    item.requeue_after(delay)
                }
                Action::Requeue { after, priority } => {
                    let key = item.key().clone();
                    self.queue.forget(&key);
                    // Added before the hand-out ends, as the item's own requeues are.
                    let options = AddOptions::default().after(after).priority(priority);
                    let requeued = self.queue.add_with(key, options);
                    drop(item);
                    requeued
                }
                Action::RequeueRateLimited => item.requeue_rate_limited(),
            };
            if let Err(e) = requeued {
                // Only at the end of a term (the queue shut down): the next term's sources
                // bring the key back.
                debug!(key = ?e.key(), "queue shut down; requeue dropped with the term");
            }
            // A reconcile that finished without ever awaiting something pending kept the
            // thread for all of its run: give it back before the next key, so that the elector
            // renews (or stops) and a drain's grace period ends between two such reconciles,
            // not after a budget's worth of them.
            if !pended {
                tokio::task::yield_now().await;
            }
        }
    }
}

impl<K, E> Reconciler<K, E> {
    /// Counts `event` and hands it to the hooks.
    pub(crate) fn emit(&self, event: &Event<'_, K>) {
        self.stats.record(event);
        for hook in &self.hooks {
            hook(event);
        }
    }

    fn policy(&self, key: &K, err: &ReconcileError<E>, attempts: u32) -> Action {
        catch_unwind(AssertUnwindSafe(|| (self.policy)(key, err, attempts)))
            .unwrap_or(Action::RequeueRateLimited)
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

/// How a reconcile's future ended: it returned (or panicked), or its hard deadline passed.
enum Finished<T> {
    Returned(T),
    TimedOut,
}

/// Reports a worker's reconcile aborted when dropped: forgotten once the reconcile ends, so
/// dropped only with a worker aborted in the middle of one.
struct Aborted<'a, K: Key, E> {
    term: &'a Term<K, E>,
    key: &'a K,
    started: Instant,
}

impl<K: Key, E> Drop for Aborted<'_, K, E> {
    fn drop(&mut self) {
        self.term.in_flight.fetch_sub(1, Relaxed);
        self.term.shared.emit(&Event::ReconcileFinished {
            key: self.key,
            outcome: ReconcileOutcome::Aborted,
            took: self.started.elapsed(),
        });
    }
}
