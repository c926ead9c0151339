//! What a candidate publishes about its election: the [`ElectorStatus`] watch, the lossless
//! leadership events and, with the `prometheus` feature, client-go's metrics. The elector
//! reports each transition, lock answer and counter to one [`Reports`], which keeps the three
//! in step.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::{Leadership, LeadershipEnd, LeadershipEvent, LeadershipEvents, LockError};

/// What a candidate observes of its election, published through
/// [`LeaderElector::subscribe_status`](crate::LeaderElector::subscribe_status).
///
/// # Examples
///
/// ```
/// let status = ctrlq_leader::ElectorStatus::default();
/// assert!(!status.leading && status.last_error.is_none());
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ElectorStatus {
    /// Whether this candidate holds the lease and renews it.
    pub leading: bool,
    /// The last observed holder identity (empty: none).
    pub leader: String,
    /// The fencing token of the current grant, while leading.
    pub fencing_token: Option<u64>,
    /// Lock operations that failed in a row (reset by any answer from the store).
    pub consecutive_failures: u64,
    /// The last lock failure (the store unreachable, timed out, refusing); kept after recovery.
    pub last_error: Option<Arc<LockError>>,
    /// Lock operations that failed, in all (backend errors; lost races are not failures).
    pub lock_errors: u64,
    /// Renews that took the slow path: a get before the update, after the update of the
    /// record last written failed.
    pub slow_path_renews: u64,
    /// Acquires granted only after their renew deadline had passed, so that this candidate did
    /// not lead on them and backed off (see [`LeaderElector`](crate::LeaderElector)); a store
    /// this slow for this candidate shows here.
    pub late_acquires: u64,
}

/// After this many lock failures in a row the elector logs a warning (and again every
/// [`WARN_EVERY`] failures while they last); each single failure is a `debug!`.
const WARN_AFTER: u64 = 3;
const WARN_EVERY: u64 = 30;

/// The elector's side of its status watch, its leadership events and its metrics.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    pub(crate) status: watch::Sender<ElectorStatus>,
    /// One sender per live subscriber of the leadership events.
    pub(crate) events: Mutex<Vec<mpsc::UnboundedSender<LeadershipEvent>>>,
    /// The metrics, with the election's name, their label.
    #[cfg(feature = "prometheus")]
    pub(crate) metrics: std::sync::OnceLock<(Arc<crate::prometheus::LeaderMetrics>, String)>,
    /// The lock's description, for warnings.
    pub(crate) lock: String,
}

impl Reports {
    pub(crate) fn subscribe_leadership(&self) -> LeadershipEvents {
        let (tx, rx) = mpsc::unbounded_channel();
        self.events.lock().push(tx);
        LeadershipEvents { rx }
    }

    /// A term started: leading, with the grant's fencing token.
    pub(crate) fn started(&self, fencing_token: u64) {
        self.set_leading(Some(fencing_token));
        let at = Instant::now();
        self.send(LeadershipEvent::Started { at, fencing_token });
    }

    /// The term of `leadership` ended: no longer leading, for the reason it records.
    pub(crate) fn stopped(&self, leadership: &Leadership) {
        self.set_leading(None);
        self.send(LeadershipEvent::Stopped {
            at: Instant::now(),
            fencing_token: leadership.fencing_token(),
            // The elector records why before it stops leading; the fallback is never taken.
            reason: leadership
                .end_reason()
                .unwrap_or(LeadershipEnd::WorkFinished),
        });
    }

    /// Sends to every subscriber, dropping those whose receiver is gone.
    fn send(&self, event: LeadershipEvent) {
        self.events.lock().retain(|tx| tx.send(event).is_ok());
    }

    fn set_leading(&self, fencing_token: Option<u64>) {
        let leading = fencing_token.is_some();
        self.status.send_modify(|s| {
            s.leading = leading;
            s.fencing_token = fencing_token;
        });
        #[cfg(feature = "prometheus")]
        if let Some((m, name)) = self.metrics.get() {
            m.set_leading(name, leading);
        }
    }

    /// The holder of the last observed record, published as the leader.
    pub(crate) fn leader(&self, holder: &str) {
        self.status.send_if_modified(|s| {
            if s.leader == holder {
                return false;
            }
            debug!(leader = %holder, "new leader observed");
            s.leader = holder.to_owned();
            true
        });
    }

    /// A renew took the slow path.
    pub(crate) fn slow_path(&self) {
        self.status.send_modify(|s| s.slow_path_renews += 1);
        #[cfg(feature = "prometheus")]
        if let Some((m, name)) = self.metrics.get() {
            m.slow_path(name);
        }
    }

    /// Counts the answer to a lock operation and passes its value on: a backend error, or a
    /// create answered with [`LockError::NotFound`], is a failure (warned about when failures
    /// persist); any other answer, a lost race or a record that moved included, shows the store
    /// answers and resets the failures in a row.
    pub(crate) fn answered<T>(&self, result: Result<T, LockError>, op: &'static str) -> Option<T> {
        let err = match result {
            Ok(v) => {
                self.store_answers();
                return Some(v);
            }
            Err(err @ LockError::Backend(_)) => Arc::new(err),
            // A record absent from a store that cannot create it (a user's lock whose place
            // for the record is missing) is no lost race: it fails on every try.
            Err(err @ LockError::NotFound) if op == "create" => Arc::new(err),
            Err(err) => {
                debug!(error = %err, op, "lock operation refused");
                self.store_answers();
                return None;
            }
        };
        #[cfg(feature = "prometheus")]
        if let Some((m, name)) = self.metrics.get() {
            m.lock_error(name);
        }
        let error = &*err as &(dyn std::error::Error + 'static);
        self.status.send_modify(|s| {
            s.lock_errors += 1;
            s.consecutive_failures += 1;
            let n = s.consecutive_failures;
            if n >= WARN_AFTER && (n - WARN_AFTER).is_multiple_of(WARN_EVERY) {
                let lock = &self.lock;
                warn!(%lock, failures = n, error, op, "lock keeps failing");
            } else {
                debug!(error, op, "lock operation failed");
            }
            s.last_error = Some(err.clone());
        });
        None
    }

    /// The store answered: resets the failures in a row (waking watchers only if there were
    /// some).
    pub(crate) fn store_answers(&self) {
        self.status.send_if_modified(|s| {
            let was = s.consecutive_failures;
            s.consecutive_failures = 0;
            if was >= WARN_AFTER {
                warn!(failures = was, "lock answers again");
            }
            was != 0
        });
    }
}
