//! One worker of a term: takes keys from the term's queue, runs the reconcile on each, and
//! applies what it returned.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use ctrlq_queue_async::WorkQueue;
use futures::FutureExt;
use tokio::time::Instant;
use tracing::{Instrument, Level, debug, debug_span};

use super::Term;
use crate::action::panic_message;
use crate::event::{Outcome, ReconcileOutcome};
use crate::key::Key;
use crate::stats::{Counts, WorkerSlot};
use crate::{Action, Context, Event, ReconcileError};

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
        let timed = hooked || shared.telemetry.is_timed();
        let slot = &self.workers[index];
        let mut counts = Counts::new(&shared.telemetry.stats);
        // The queue alone wakes a waiting worker, at a key or at its shutdown: a stop token in
        // a `select!` next to `get` would cost every key a poll of it and a copy of both futures.
        while let Some(item) = self.queue.get().await {
            // A key taken after the stop is dropped unstarted: the term's queue goes with the
            // term. So is one taken once the lease may have lapsed on this process's clock
            // (after a freeze, before the elector's task has run again), unless a renew that
            // answered in time turns out to hold it.
            if self.stopping.load(Relaxed) || !self.granted().await {
                return;
            }
            // The reconcile is awaited here rather than in a helper `async fn`: the helper's
            // future, holding the item and the guard, would be built and copied into this one
            // at every key.
            let key = item.key();
            let attempts = self.attempts(key);
            if !self.reconciled.load(Relaxed) && !self.reconciled.swap(true, Relaxed) {
                self.first_reconcile();
            }
            if hooked {
                shared.emit(&Event::ReconcileStarted { key, attempts });
            }
            let mut guard = InFlight::new(&self, slot, key, timed);
            let ctx = Context {
                token: token.clone(),
                attempts,
                fencing: self.fencing,
            };
            // Whether the reconcile ever gave the thread back.
            let mut pended = false;
            let result = match catch_unwind(AssertUnwindSafe(|| reconcile(key.clone(), ctx))) {
                // Instrumented only for an interested subscriber: with tracing's `log` feature
                // on (kube-client turns it on) and no subscriber, a disabled span still records
                // its fields and goes through the `log` fallback at every enter and exit, and
                // even an empty span is entered and left at every poll.
                Ok(fut) if tracing::enabled!(Level::DEBUG) => {
                    let span = debug_span!("reconcile", key = ?key, attempts);
                    let fut = AssertUnwindSafe(fut).catch_unwind().instrument(span);
                    noting_pending(fut, &mut pended).await
                }
                Ok(fut) => noting_pending(AssertUnwindSafe(fut).catch_unwind(), &mut pended).await,
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
            self.track_failing(attempts, action);
            apply(&self.queue, item, action);
            // A reconcile that finished without ever awaiting something pending kept the
            // thread for all of its run: give it back before the next key, so that the elector
            // renews (or stops) and a drain's grace period ends between two such reconciles,
            // not after a budget's worth of them.
            if !pended {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Whether the term's lease holds now, waiting if it may have lapsed until the elector
    /// renews it or ends it; `true` without a lease.
    async fn granted(&self) -> bool {
        match &self.grant {
            Some(grant) if !grant.is_current() => {
                debug!("lease not current on this clock; waiting for the elector");
                grant.current().await && !self.stopping.load(Relaxed)
            }
            _ => true,
        }
    }

    /// Reports the term's first reconcile: how long after the term began it starts.
    fn first_reconcile(&self) {
        let after = self.began.elapsed();
        self.shared.telemetry.first_reconcile(after);
        debug!(?after, shard = self.shard, "first reconcile of the term");
        self.shared.emit(&Event::FirstReconcile {
            shard: self.shard,
            after,
        });
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
    fn track_failing(&self, attempts: u32, action: Action) {
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
        self.shared.telemetry.finished(outcome, took);
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
        term.shared.telemetry.active(1);
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
        self.term.shared.telemetry.active(-1);
        self.start.map_or(Duration::ZERO, |start| start.elapsed())
    }
}

impl<K: Key, E> Drop for InFlight<'_, K, E> {
    fn drop(&mut self) {
        if self.armed {
            let took = self.finish();
            self.term.shared.telemetry.aborted();
            self.term.shared.emit(&Event::ReconcileFinished {
                key: self.key,
                outcome: ReconcileOutcome::Aborted,
                took,
            });
        }
    }
}

/// Awaits `fut`, setting `pended` if it ever returns `Pending`.
async fn noting_pending<F: Future>(fut: F, pended: &mut bool) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        let poll = fut.as_mut().poll(cx);
        *pended |= poll.is_pending();
        poll
    })
    .await
}

/// Applies `action` to the finished `item` of `queue`.
///
/// Inlined into the worker loop: a call would move the item into it at every key.
#[inline]
fn apply<K: Key>(queue: &WorkQueue<K>, item: ctrlq_queue_async::Item<K>, action: Action) {
    let r = match action {
        Action::Done => {
            item.forget();
            Ok(())
        }
        Action::RequeueAfter(delay) => {
            queue.forget(item.key());
            item.requeue_after(delay)
        }
        Action::RequeueRateLimited => item.requeue_rate_limited(),
    };
    if let Err(e) = r {
        // Only at the end of a term (the queue shut down): the next term's sources bring the
        // key back.
        debug!(key = ?e.key(), "queue shut down; requeue dropped with the term");
    }
}
