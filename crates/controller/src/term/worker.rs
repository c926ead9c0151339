//! One worker of a term: takes keys from the term's queue, runs the reconcile on each, and
//! applies what it returned.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::{Instrument, Level, debug, debug_span};

use super::Term;
use crate::action::panic_message;
use crate::key::Key;
use crate::{Action, Context, Event, ReconcileError, ReconcileOutcome};

impl<K: Key, E: Send + 'static> Term<K, E> {
    /// One worker: takes keys until the term stops taking them or the queue shuts down.
    pub(super) async fn work<F, Fut>(self: Arc<Self>, reconcile: Arc<F>)
    where
        F: Fn(K, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        // The reconciles' token, shared by this worker's contexts.
        let token = Arc::new(self.ctx_token.clone());
        // The queue alone wakes a waiting worker, at a key or at its shutdown.
        while let Some(item) = self.queue.get().await {
            // A key taken after the stop is dropped unstarted: the term's queue goes with the
            // term. So is one taken once the lease may have lapsed on this process's clock
            // (after a freeze, before the elector's task has run again), unless a renew that
            // answered in time turns out to hold it.
            if self.stopping.load(Relaxed) || !self.granted().await {
                return;
            }
            let key = item.key();
            let attempts = u32::try_from(self.queue.num_requeues(key)).unwrap_or(u32::MAX);
            if !self.reconciled.load(Relaxed) && !self.reconciled.swap(true, Relaxed) {
                let after = self.began.elapsed();
                debug!(?after, shard = self.shard, "first reconcile of the term");
                let shard = self.shard;
                self.shared.emit(&Event::FirstReconcile { shard, after });
            }
            self.shared.emit(&Event::ReconcileStarted { key, attempts });
            let mut guard = InFlight::new(&self, key);
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
                // its fields and goes through the `log` fallback at every enter and exit.
                Ok(fut) if tracing::enabled!(Level::DEBUG) => {
                    let span = debug_span!("reconcile", key = ?key, attempts);
                    let fut = AssertUnwindSafe(fut).catch_unwind().instrument(span);
                    noting_pending(fut, &mut pended).await
                }
                Ok(fut) => noting_pending(AssertUnwindSafe(fut).catch_unwind(), &mut pended).await,
                Err(payload) => Err(payload),
            };
            let took = guard.finish();
            let (action, outcome) = match result {
                Ok(Ok(action)) => (action, ReconcileOutcome::Ok(action)),
                Ok(Err(e)) => {
                    let action = self
                        .shared
                        .policy(key, &ReconcileError::Failed(e), attempts);
                    (action, ReconcileOutcome::Error(action))
                }
                Err(payload) => {
                    let msg = panic_message(&*payload);
                    debug!(key = ?key, panic = %msg, "reconcile panicked");
                    let err = ReconcileError::Panicked(msg);
                    let action = self.shared.policy(key, &err, attempts);
                    (action, ReconcileOutcome::Panic(action))
                }
            };
            let finished = Event::ReconcileFinished { key, outcome, took };
            self.shared.emit(&finished);
            drop(guard);
            let requeued = match action {
                Action::Done => {
                    item.forget();
                    Ok(())
                }
                Action::RequeueAfter(delay) => {
                    self.queue.forget(item.key());
                    item.requeue_after(delay)
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
}

/// Marks the worker's reconcile in flight; if dropped before [`finish`](Self::finish) (the
/// worker was aborted), reports it aborted.
struct InFlight<'a, K: Key, E> {
    term: &'a Term<K, E>,
    key: &'a K,
    start: Instant,
    armed: bool,
}

impl<'a, K: Key, E> InFlight<'a, K, E> {
    fn new(term: &'a Term<K, E>, key: &'a K) -> Self {
        term.in_flight.fetch_add(1, Relaxed);
        Self {
            term,
            key,
            start: Instant::now(),
            armed: true,
        }
    }

    fn finish(&mut self) -> Duration {
        self.armed = false;
        self.term.in_flight.fetch_sub(1, Relaxed);
        self.start.elapsed()
    }
}

impl<K: Key, E> Drop for InFlight<'_, K, E> {
    fn drop(&mut self) {
        if self.armed {
            let took = self.finish();
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
