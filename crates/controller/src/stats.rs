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
    pub(crate) successes: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) aborted: AtomicU64,
    pub(crate) terms: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
}

/// One worker's counters, written by that worker alone and on cache lines of their own, so
/// that counting a reconcile moves no cache line between cores. Added into [`Stats`] when the
/// term ends.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerStats {
    /// 1 while the worker runs a reconcile.
    pub(crate) in_flight: AtomicU64,
    successes: AtomicU64,
    errors: AtomicU64,
    panics: AtomicU64,
}

impl WorkerStats {
    /// Counts one finished reconcile.
    pub(crate) fn count(&self, outcome: Outcome) {
        match outcome {
            Outcome::Success | Outcome::Requeue | Outcome::RequeueAfter => &self.successes,
            Outcome::Error => &self.errors,
            Outcome::Panic => &self.panics,
        }
        .fetch_add(1, Relaxed);
    }
}

impl Stats {
    /// Adds a finished worker's counts.
    pub(crate) fn absorb(&self, w: &WorkerStats) {
        self.successes.fetch_add(w.successes.load(Relaxed), Relaxed);
        self.errors.fetch_add(w.errors.load(Relaxed), Relaxed);
        self.panics.fetch_add(w.panics.load(Relaxed), Relaxed);
    }
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

    /// Whether the metrics read how long each reconcile took.
    pub(crate) fn is_timed(&self) -> bool {
        #[cfg(feature = "prometheus")]
        if self.prometheus.is_some() {
            return true;
        }
        false
    }

    /// Records one reconcile in the metrics (the counts behind the summary are the workers'
    /// own, see [`WorkerStats`]).
    pub(crate) fn finished(&self, outcome: Outcome, took: Duration) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.finished(&self.name, outcome, took);
        }
        let _ = (outcome, took);
    }

    pub(crate) fn aborted(&self) {
        self.stats.aborted.fetch_add(1, Relaxed);
    }
}

impl Recorder {
    pub(crate) fn summary(&self, drained: bool) -> crate::Summary {
        let s = &self.stats;
        let (successes, errors, panics) = (
            s.successes.load(Relaxed),
            s.errors.load(Relaxed),
            s.panics.load(Relaxed),
        );
        crate::Summary {
            reconciles: successes + errors + panics,
            successes,
            errors,
            panics,
            aborted: s.aborted.load(Relaxed),
            terms: s.terms.load(Relaxed),
            leases_lost: s.leases_lost.load(Relaxed),
            drained,
        }
    }
}
