//! What the workers of every term share: the reconcile function, type-erased once per worker,
//! the error policy, the event hooks and the telemetry.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tracing::{debug, warn};

use super::{Term, TermEnd};
use crate::key::Key;
use crate::source::SourceReport;
use crate::stats::Telemetry;
use crate::{Action, Context, Event, ReconcileError, SourceFailure};

/// The reconcile function, able to start one worker of a term. Its type is erased here, once
/// per worker started, rather than at each call: the worker loop is compiled for the user's
/// function, so each reconcile's future is awaited inline instead of boxed.
pub(crate) trait StartWorker<K, E>: Send + Sync {
    fn start(self: Arc<Self>, term: Arc<Term<K, E>>, index: usize) -> BoxFuture<'static, ()>
    where
        K: Key,
        E: Send + 'static;
}

impl<K, E, F, Fut> StartWorker<K, E> for F
where
    F: Fn(K, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    fn start(self: Arc<Self>, term: Arc<Term<K, E>>, index: usize) -> BoxFuture<'static, ()>
    where
        K: Key,
        E: Send + 'static,
    {
        term.work(self, index).boxed()
    }
}

pub(crate) type Policy<K, E> = Arc<dyn Fn(&K, &ReconcileError<E>, u32) -> Action + Send + Sync>;
pub(crate) type Hook<K> = Arc<dyn Fn(&Event<'_, K>) + Send + Sync>;

/// The reconcile function with what surrounds each call (the error policy, the event hooks,
/// the telemetry): what the workers of every term share.
pub(crate) struct Reconciler<K, E> {
    pub(crate) reconcile: Arc<dyn StartWorker<K, E>>,
    pub(crate) policy: Policy<K, E>,
    pub(crate) hooks: Vec<Hook<K>>,
    pub(crate) telemetry: Telemetry,
}

impl<K, E> Reconciler<K, E> {
    /// Counts and reports the end of a term.
    pub(super) fn ended(&self, end: TermEnd, aborted: u64) {
        match end {
            TermEnd::Drained { .. } => self.emit(&Event::DrainFinished { aborted }),
            TermEnd::Lost => {
                self.telemetry.stats.leases_lost.fetch_add(1, Relaxed);
                self.emit(&Event::LeadershipLost { aborted });
            }
        }
        debug!(?end, aborted, "term ended");
    }

    /// Reports a term's queue filled with `keys` keys from the warm view.
    pub(crate) fn warm_start(&self, shard: Option<u32>, keys: usize) {
        debug!(keys, shard, "queue filled from the warm view");
        self.emit(&Event::WarmStart { shard, keys });
    }

    pub(crate) fn emit(&self, event: &Event<'_, K>) {
        for hook in &self.hooks {
            hook(event);
        }
    }

    pub(super) fn policy(&self, key: &K, err: &ReconcileError<E>, attempts: u32) -> Action {
        catch_unwind(AssertUnwindSafe(|| (self.policy)(key, err, attempts)))
            .unwrap_or(Action::RequeueRateLimited)
    }
}

impl<K: Key, E: 'static> SourceReport for Reconciler<K, E> {
    fn source_error(&self, index: usize, error: &str) {
        self.telemetry.stats.source_errors.fetch_add(1, Relaxed);
        warn!(source = index, error, "a source yielded an error");
        self.emit(&Event::SourceError {
            source: index,
            error,
        });
    }

    fn source_failed(&self, index: usize, failure: &SourceFailure, retry_in: Duration) {
        self.telemetry.stats.source_failures.fetch_add(1, Relaxed);
        warn!(source = index, %failure, ?retry_in, "a source failed; subscribing again");
        self.emit(&Event::SourceFailed {
            source: index,
            failure,
            retry_in,
        });
    }
}
