//! The runner's own counters, behind [`Summary`](crate::Summary) and the metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[cfg(feature = "prometheus")]
use std::sync::Arc;

/// How a reconcile ended, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Returned [`Action::Done`](crate::Action::Done).
    Success,
    /// Returned [`Action::RequeueRateLimited`](crate::Action::RequeueRateLimited).
    Requeue,
    /// Returned [`Action::RequeueAfter`](crate::Action::RequeueAfter).
    RequeueAfter,
    /// Returned an error.
    Error,
    /// Panicked.
    Panic,
}

/// Counters of one run, shared by its workers.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) reconciles: AtomicU64,
    pub(crate) successes: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) aborted: AtomicU64,
    pub(crate) terms: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
}

/// The stats and, with the `prometheus` feature, the registered families.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub(crate) stats: Stats,
    #[cfg(feature = "prometheus")]
    pub(crate) prometheus: Option<Arc<crate::metrics::ControllerMetrics>>,
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) name: String,
}

impl Recorder {
    pub(crate) fn workers(&self, n: usize) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.set_max_concurrent(&self.name, n);
        }
        let _ = n;
    }

    pub(crate) fn active(&self, delta: i64) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.add_active(&self.name, delta);
        }
        let _ = delta;
    }

    pub(crate) fn finished(&self, outcome: Outcome, took: Duration) {
        let s = &self.stats;
        s.reconciles.fetch_add(1, Relaxed);
        match outcome {
            Outcome::Success | Outcome::Requeue | Outcome::RequeueAfter => {
                s.successes.fetch_add(1, Relaxed)
            }
            Outcome::Error => s.errors.fetch_add(1, Relaxed),
            Outcome::Panic => s.panics.fetch_add(1, Relaxed),
        };
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.finished(&self.name, outcome, took);
        }
        let _ = took;
    }

    pub(crate) fn aborted(&self) {
        self.stats.aborted.fetch_add(1, Relaxed);
    }
}

impl Recorder {
    pub(crate) fn summary(&self, drained: bool) -> crate::Summary {
        let s = &self.stats;
        crate::Summary {
            reconciles: s.reconciles.load(Relaxed),
            successes: s.successes.load(Relaxed),
            errors: s.errors.load(Relaxed),
            panics: s.panics.load(Relaxed),
            aborted: s.aborted.load(Relaxed),
            terms: s.terms.load(Relaxed),
            leases_lost: s.leases_lost.load(Relaxed),
            drained,
        }
    }
}
