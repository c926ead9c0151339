//! [`Event`]: what the runner reports as it happens, and [`Summary`]: what a run did.

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
    /// A term began: the sources are subscribed and the workers run. Without an elector there is
    /// one term, with no fencing token.
    Leading {
        /// The term's fencing token.
        fencing_token: Option<u64>,
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
    /// It was dropped unfinished (lost lease, or the grace period ran out).
    Aborted,
}

/// What a [`Controller::run`](crate::Controller::run) did, returned after the drain.
///
/// `reconciles` = `successes` + `errors` + `panics`; aborted reconciles are counted apart.
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
    /// Reconciles dropped unfinished: at a lost lease, or when the grace period ran out.
    pub aborted: u64,
    /// Terms led (1 without an elector, if the run started).
    pub terms: u64,
    /// Terms that ended with a lost lease.
    pub leases_lost: u64,
    /// How the run's shutdown drain went: finished, cut short, or none at all because the
    /// replica was not leading when the run ended (a follower that never led is not a failed
    /// drain).
    pub drain: Drain,
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

impl Summary {
    /// Errors and panics.
    #[must_use]
    pub fn failures(&self) -> u64 {
        self.errors + self.panics
    }
}
