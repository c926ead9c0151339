//! The runner's own counters, behind [`Summary`](crate::Summary) and the metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[cfg(feature = "prometheus")]
use std::sync::Arc;

use crate::event::Outcome;

/// Counters of one run, shared by its workers.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) successes: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) aborted: AtomicU64,
    pub(crate) terms: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) source_errors: AtomicU64,
    pub(crate) source_failures: AtomicU64,
    /// The longest time from a term's start to its first reconcile, in nanoseconds plus one;
    /// 0 while no term has reconciled.
    pub(crate) slowest_first_reconcile: AtomicU64,
}

/// Whether one worker runs a reconcile: written by that worker alone, on a cache line of its
/// own so that the writes move no cache line between cores, and read by the drain.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerSlot {
    pub(crate) in_flight: AtomicBool,
}

/// One worker's finished reconciles, counted in plain integers and added into [`Stats`] when
/// the worker ends, however it ends: an aborted worker's future is dropped, and this with it.
#[derive(Debug)]
pub(crate) struct Counts<'a> {
    stats: &'a Stats,
    pub(crate) successes: u64,
    pub(crate) errors: u64,
    pub(crate) panics: u64,
}

impl<'a> Counts<'a> {
    pub(crate) fn new(stats: &'a Stats) -> Self {
        Self {
            stats,
            successes: 0,
            errors: 0,
            panics: 0,
        }
    }
}

impl Drop for Counts<'_> {
    fn drop(&mut self) {
        let s = self.stats;
        s.successes.fetch_add(self.successes, Relaxed);
        s.errors.fetch_add(self.errors, Relaxed);
        s.panics.fetch_add(self.panics, Relaxed);
    }
}

/// What a run reports about itself: its counters and, with the `prometheus` feature, the
/// registered families.
#[derive(Debug, Default)]
pub(crate) struct Telemetry {
    pub(crate) stats: Stats,
    #[cfg(feature = "prometheus")]
    pub(crate) prometheus: Option<Arc<crate::prometheus::ControllerMetrics>>,
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    pub(crate) name: String,
}

impl Telemetry {
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
    /// own, see [`Counts`]).
    pub(crate) fn finished(&self, outcome: Outcome, took: Duration) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.finished(&self.name, outcome, took);
        }
        let _ = (outcome, took);
    }

    /// Sharded: a shard's term began (`true`) or ended on this replica.
    pub(crate) fn shard(&self, gained: bool) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.shard(&self.name, gained);
        }
        let _ = gained;
    }

    /// Records how long after its start a term began its first reconcile.
    pub(crate) fn first_reconcile(&self, after: Duration) {
        #[cfg(feature = "prometheus")]
        if let Some(p) = &self.prometheus {
            p.first_reconcile(&self.name, after);
        }
        let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX - 1);
        self.stats
            .slowest_first_reconcile
            .fetch_max(nanos + 1, Relaxed);
    }

    pub(crate) fn aborted(&self) {
        self.stats.aborted.fetch_add(1, Relaxed);
    }
}

impl Telemetry {
    pub(crate) fn summary(&self, drain: crate::Drain) -> crate::Summary {
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
            source_errors: s.source_errors.load(Relaxed),
            source_failures: s.source_failures.load(Relaxed),
            slowest_first_reconcile: match s.slowest_first_reconcile.load(Relaxed) {
                0 => None,
                n => Some(Duration::from_nanos(n - 1)),
            },
            drain,
        }
    }
}
