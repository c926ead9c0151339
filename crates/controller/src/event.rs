//! [`Event`]: what the runner reports as it happens, and [`Summary`]: what a run did.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A transition of the runner, handed to the hook given to
/// [`Controller::on_event`](crate::Controller::on_event) as it happens.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::Event;
///
/// fn describe(event: &Event<'_, String>) -> String {
///     match event {
///         Event::Leading { fencing_token } => format!("leading, term {fencing_token:?}"),
///         Event::ReconcileFinished { key, outcome, .. } => format!("{key}: {outcome:?}"),
///         other => format!("{other:?}"),
///     }
/// }
/// assert_eq!(describe(&Event::Leading { fencing_token: Some(3) }), "leading, term Some(3)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a, K> {
    /// A term began: its queue is filled (from the warm view, or by subscribing the sources)
    /// and the workers run. Without an elector there is one term, with no fencing token.
    Leading {
        /// The term's fencing token.
        fencing_token: Option<u64>,
    },
    /// A term's queue was filled from the warm view as the term began: `keys` keys the
    /// replica's sources had yielded (those of the shard, when sharded), queued at once,
    /// without subscribing any source again. See
    /// [`Controller::warm_standby`](crate::Controller::warm_standby).
    WarmStart {
        /// The shard whose term it is; `None` without sharding.
        shard: Option<u32>,
        /// The keys the queue was filled with.
        keys: usize,
    },
    /// A term's first reconcile is about to start (before its
    /// [`ReconcileStarted`](Self::ReconcileStarted)): `after` is how long since the term began,
    /// that is since the lease (or the shard's lease) was won. Also in
    /// [`Summary::slowest_first_reconcile`].
    FirstReconcile {
        /// The shard whose term it is; `None` without sharding.
        shard: Option<u32>,
        /// The time from the term's start to this reconcile's.
        after: Duration,
    },
    /// A reconcile of `key` is about to start.
    ReconcileStarted {
        /// The key.
        key: &'a K,
        /// Its failures in a row so far.
        attempts: u32,
    },
    /// A reconcile of `key` ended.
    ReconcileFinished {
        /// The key.
        key: &'a K,
        /// How it ended.
        outcome: ReconcileOutcome,
        /// How long it ran.
        took: Duration,
    },
    /// A reconcile of `key` ran past a deadline that could not cut it short: its hard deadline
    /// ([`Controller::hard_deadline`](crate::Controller::hard_deadline)) passed while it ran
    /// without awaiting (a future is dropped only at an `.await`), or, with no hard deadline,
    /// its soft one passed before it returned. Emitted after its
    /// [`ReconcileFinished`](Self::ReconcileFinished).
    ReconcileOverran {
        /// The key.
        key: &'a K,
        /// The deadline it ran past, from its start.
        deadline: Duration,
        /// How long it ran.
        ran: Duration,
    },
    /// The lease was lost: in-flight reconciles were dropped at once and the term's queue with
    /// them. The runner stands for election again.
    LeadershipLost {
        /// Reconciles dropped.
        aborted: u64,
    },
    /// A shutdown was requested: workers stop taking keys and in-flight reconciles get the grace
    /// period to finish.
    DrainStarted {
        /// Reconciles in flight.
        in_flight: u64,
    },
    /// The drain ended.
    DrainFinished {
        /// Reconciles dropped when the grace period ran out.
        aborted: u64,
    },
    /// A source given with [`try_source`](crate::Controller::try_source) yielded an error. The
    /// source goes on; if it ends right after the error, [`SourceFailed`](Self::SourceFailed)
    /// follows.
    SourceError {
        /// The source's position, in the order the sources were given.
        source: usize,
        /// The error's message.
        error: &'a str,
    },
    /// A source failed: its stream panicked (or its subscribe function did), or it ended right
    /// after an error. Every key it yielded before is queued; it is subscribed again after
    /// `retry_in`, as kube-runtime re-lists a failed watch.
    SourceFailed {
        /// The source's position, in the order the sources were given.
        source: usize,
        /// How it failed.
        failure: &'a SourceFailure,
        /// When it is subscribed again (1 s, doubling at each failure in a row up to 30 s).
        retry_in: Duration,
    },
    /// Sharded: the live members changed, and with them the shards assigned to this replica
    /// (it stands for those, and hands back, after draining, the ones it holds and no longer
    /// has).
    ShardsAssigned {
        /// The shards assigned to this replica.
        shards: &'a [u32],
        /// The live members, this replica among them, sorted.
        members: &'a [String],
    },
    /// Sharded: this replica takes no shard (another live member has another shard count, or
    /// another process uses this replica's identity, or its member record is not renewed); it
    /// hands back what it holds.
    ShardingRefused {
        /// Why.
        reason: &'a str,
    },
    /// Sharded: this replica won a shard's lease; a term runs on it.
    ShardLeading {
        /// The shard.
        shard: u32,
        /// The shard lease's fencing token.
        fencing_token: u64,
    },
    /// Sharded: a shard's term ended, drained after a hand-back or a shutdown, or lost.
    ShardEnded {
        /// The shard.
        shard: u32,
        /// Whether its lease was lost (else it drained).
        lost: bool,
    },
    /// Sharded: a watch that follows the held shards (`kube::Watch::for_shards`) listed `shard`
    /// and received objects of other shards with it: the API server ignored the shard selector
    /// (its `ShardedListAndWatch` feature gate is off, or it is older). The watch keeps only
    /// the shard's objects, at the traffic of the whole collection. Reported at each such list
    /// of a shard this replica wins; the first is also logged as a warning.
    ShardSelectorIgnored {
        /// The shard.
        shard: u32,
    },
    /// Sharded: the shards held by no replica as this replica's last look at the shard leases
    /// saw them (no lease yet, a lease released, or one unchanged for its duration because its
    /// holder stopped), after every look that finds some, and once when none are left. Every
    /// replica reports its own look; after a membership change each shard has a holder again
    /// within the settling bounds of the [sharding docs](crate::shard).
    ShardsUnowned {
        /// The shards, ascending; empty once every shard has a holder.
        shards: &'a [u32],
        /// How long the one unowned longest has been so, from the first look that found it.
        longest: Duration,
    },
}

/// How a source failed ([`Event::SourceFailed`]).
///
/// # Examples
///
/// ```
/// use ctrlq_controller::SourceFailure;
/// let f = SourceFailure::EndedWithError("watch expired".into());
/// assert_eq!(f.to_string(), "ended after an error: watch expired");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceFailure {
    /// The stream, or the function that makes it, panicked; the panic's message.
    Panicked(String),
    /// The stream ended right after yielding this error.
    EndedWithError(String),
}

impl std::fmt::Display for SourceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Panicked(msg) => write!(f, "panicked: {msg}"),
            Self::EndedWithError(e) => write!(f, "ended after an error: {e}"),
        }
    }
}

/// How one reconcile ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReconcileOutcome {
    /// It returned this action.
    Ok(crate::Action),
    /// It returned an error; the error policy chose this action.
    Error(crate::Action),
    /// It panicked; the error policy chose this action.
    Panic(crate::Action),
    /// It was dropped at its hard deadline; the error policy chose this action.
    TimedOut(crate::Action),
    /// It was dropped unfinished (lost lease, or the grace period ran out).
    Aborted,
}

/// What a [`Controller::run`](crate::Controller::run) did, returned after the drain.
///
/// `reconciles` = `successes` + `errors` + `panics` + `timeouts`; aborted reconciles are counted
/// apart.
///
/// # Examples
///
/// ```
/// let summary = ctrlq_controller::Summary::default();
/// assert_eq!(summary.failures(), 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Reconciles that returned or panicked.
    pub reconciles: u64,
    /// Reconciles that returned `Ok`.
    pub successes: u64,
    /// Reconciles that returned `Err`.
    pub errors: u64,
    /// Reconciles that panicked.
    pub panics: u64,
    /// Reconciles dropped at their hard deadline.
    pub timeouts: u64,
    /// Reconciles that ran past a deadline that could not cut them short
    /// ([`Event::ReconcileOverran`]).
    pub overruns: u64,
    /// Reconciles dropped unfinished: at a lost lease, or when the grace period ran out.
    pub aborted: u64,
    /// Terms led (1 without an elector, if the run started).
    pub terms: u64,
    /// Terms that ended with a lost lease.
    pub leases_lost: u64,
    /// Error items the sources yielded ([`Event::SourceError`]).
    pub source_errors: u64,
    /// Times a source failed and was subscribed again ([`Event::SourceFailed`]).
    pub source_failures: u64,
    /// The longest time from a term's start (a lease or a shard's lease won) to its first
    /// reconcile, over the terms that started one ([`Event::FirstReconcile`]); `None` if none
    /// did.
    pub slowest_first_reconcile: Option<Duration>,
    /// How the run's shutdown drain went: finished, cut short, or none at all because the
    /// replica was not leading when the run ended (a follower that never led is not a failed
    /// drain).
    pub drain: Drain,
    /// The source that did not deliver its initial list within the
    /// [sync timeout](crate::Controller::sync_timeout): the run stopped before it led or
    /// reconciled anything.
    pub not_synced: Option<NotSynced>,
}

/// A source did not deliver its initial list (a watch did not sync) within the bound: what
/// [`Summary::not_synced`] and, with the `kube` feature, `Watch::synced` report.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let e = ctrlq_controller::NotSynced {
///     name: "the watch of ConfigMap".into(),
///     timeout: Duration::from_secs(120),
///     last_error: Some("403 Forbidden".into()),
/// };
/// assert_eq!(e.to_string(), "the watch of ConfigMap did not sync within 120s (last error: 403 Forbidden)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} did not sync within {timeout:?}{}", last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
pub struct NotSynced {
    /// What did not sync.
    pub name: String,
    /// The bound that passed.
    pub timeout: Duration,
    /// The source's last error, if it had one.
    pub last_error: Option<String>,
}

/// How a [`Controller::run`](crate::Controller::run) ended its last term, in [`Summary::drain`].
///
/// # Examples
///
/// ```
/// use ctrlq_controller::{Drain, Summary};
///
/// fn report(summary: &Summary) -> &'static str {
///     match summary.drain {
///         Drain::Finished => "drained",
///         Drain::CutShort => "reconciles were dropped at shutdown",
///         Drain::NotLeading => "was not leading: nothing to drain",
///         _ => "unknown",
///     }
/// }
/// assert_eq!(report(&Summary::default()), "was not leading: nothing to drain");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Drain {
    /// No drain ran: the run ended while this replica was not leading (shut down before it
    /// ever led, or while standing for election again after a lost lease).
    #[default]
    NotLeading,
    /// The in-flight reconciles finished within the grace period (or none were in flight).
    Finished,
    /// The drain ended with reconciles still in flight, which were dropped (counted in
    /// [`Summary::aborted`]): the grace period ran out, or the elector stopped renewing first
    /// (a lost lease, or its own, shorter grace period).
    CutShort,
}

impl Drain {
    /// `Finished` if `finished`, else `CutShort`: how a drain that ran ended.
    pub(crate) fn ran(finished: bool) -> Self {
        if finished {
            Self::Finished
        } else {
            Self::CutShort
        }
    }
}

/// The counters of one run, behind its [`Summary`]: each counts an [`Event`].
#[derive(Debug, Default)]
pub(crate) struct Stats {
    successes: AtomicU64,
    errors: AtomicU64,
    panics: AtomicU64,
    timeouts: AtomicU64,
    overruns: AtomicU64,
    pub(crate) aborted: AtomicU64,
    terms: AtomicU64,
    leases_lost: AtomicU64,
    source_errors: AtomicU64,
    source_failures: AtomicU64,
    /// The longest time from a term's start to its first reconcile, in nanoseconds plus one;
    /// 0 while no term has reconciled.
    slowest_first_reconcile: AtomicU64,
}

impl Stats {
    /// Counts `event`.
    pub(crate) fn record<K>(&self, event: &Event<'_, K>) {
        let counter = match event {
            Event::Leading { .. } => &self.terms,
            Event::ReconcileFinished { outcome, .. } => match outcome {
                ReconcileOutcome::Ok(_) => &self.successes,
                ReconcileOutcome::Error(_) => &self.errors,
                ReconcileOutcome::Panic(_) => &self.panics,
                ReconcileOutcome::TimedOut(_) => &self.timeouts,
                ReconcileOutcome::Aborted => &self.aborted,
            },
            Event::ReconcileOverran { .. } => &self.overruns,
            Event::LeadershipLost { .. } => &self.leases_lost,
            Event::SourceError { .. } => &self.source_errors,
            Event::SourceFailed { .. } => &self.source_failures,
            Event::FirstReconcile { after, .. } => {
                let nanos = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX - 1);
                self.slowest_first_reconcile.fetch_max(nanos + 1, Relaxed);
                return;
            }
            _ => return,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// What the run did, with how its drains went.
    pub(crate) fn summary(&self, drain: Drain) -> Summary {
        let (successes, errors, panics, timeouts) = (
            self.successes.load(Relaxed),
            self.errors.load(Relaxed),
            self.panics.load(Relaxed),
            self.timeouts.load(Relaxed),
        );
        Summary {
            reconciles: successes + errors + panics + timeouts,
            successes,
            errors,
            panics,
            timeouts,
            overruns: self.overruns.load(Relaxed),
            aborted: self.aborted.load(Relaxed),
            terms: self.terms.load(Relaxed),
            leases_lost: self.leases_lost.load(Relaxed),
            source_errors: self.source_errors.load(Relaxed),
            source_failures: self.source_failures.load(Relaxed),
            slowest_first_reconcile: match self.slowest_first_reconcile.load(Relaxed) {
                0 => None,
                n => Some(Duration::from_nanos(n - 1)),
            },
            drain,
            not_synced: None,
        }
    }
}

impl Summary {
    /// Errors, panics and timeouts.
    #[must_use]
    pub fn failures(&self) -> u64 {
        self.errors + self.panics + self.timeouts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;

    #[test]
    fn the_summary_counts_each_event_once_and_keeps_the_slowest_first_reconcile() {
        let stats = Stats::default();
        let key = 7u32;
        let finished = |outcome| Event::ReconcileFinished {
            key: &key,
            outcome,
            took: Duration::ZERO,
        };
        let failure = SourceFailure::Panicked("boom".to_owned());
        for event in [
            Event::Leading {
                fencing_token: None,
            },
            Event::ReconcileStarted {
                key: &key,
                attempts: 0,
            },
            finished(ReconcileOutcome::Ok(Action::Done)),
            finished(ReconcileOutcome::Ok(Action::RequeueRateLimited)),
            finished(ReconcileOutcome::Error(Action::Done)),
            finished(ReconcileOutcome::Panic(Action::Done)),
            finished(ReconcileOutcome::Panic(Action::RequeueRateLimited)),
            finished(ReconcileOutcome::TimedOut(Action::RequeueRateLimited)),
            finished(ReconcileOutcome::Aborted),
            Event::ReconcileOverran {
                key: &7,
                deadline: Duration::from_secs(1),
                ran: Duration::from_secs(2),
            },
            Event::LeadershipLost { aborted: 1 },
            Event::DrainStarted { in_flight: 2 },
            Event::SourceError {
                source: 0,
                error: "expired",
            },
            Event::SourceFailed {
                source: 1,
                failure: &failure,
                retry_in: Duration::ZERO,
            },
            Event::FirstReconcile {
                shard: None,
                after: Duration::from_millis(3),
            },
            Event::FirstReconcile {
                shard: Some(1),
                after: Duration::ZERO,
            },
        ] {
            stats.record(&event);
        }
        let summary = stats.summary(Drain::Finished);
        assert_eq!(
            summary,
            Summary {
                reconciles: 6,
                successes: 2,
                errors: 1,
                panics: 2,
                timeouts: 1,
                overruns: 1,
                aborted: 1,
                terms: 1,
                leases_lost: 1,
                source_errors: 1,
                source_failures: 1,
                slowest_first_reconcile: Some(Duration::from_millis(3)),
                drain: Drain::Finished,
                not_synced: None,
            }
        );
        assert_eq!(summary.failures(), 4);
    }

    #[test]
    fn a_first_reconcile_at_once_or_after_ages_is_kept_as_it_was() {
        let none = Stats::default().summary(Drain::NotLeading);
        assert_eq!(none.slowest_first_reconcile, None);
        let first = |after| {
            let stats = Stats::default();
            stats.record::<u32>(&Event::FirstReconcile { shard: None, after });
            stats.summary(Drain::NotLeading).slowest_first_reconcile
        };
        assert_eq!(first(Duration::ZERO), Some(Duration::ZERO));
        let longest = Duration::from_nanos(u64::MAX - 1);
        assert_eq!(first(Duration::MAX), Some(longest));
    }
}
