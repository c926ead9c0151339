//! What the elector publishes about itself: the status watch (leading, the observed leader,
//! the lock's failures and the counters), the lossless leadership events, and the health check.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};

use super::LeaderElector;
use crate::events::LeadershipEvents;
use crate::{ElectorStatus, HealthError, Lock, LockError};

/// After this many lock failures in a row the elector logs a warning (and again every
/// [`WARN_EVERY`] failures while they last); each single failure is a `debug!`.
const WARN_AFTER: u64 = 3;
const WARN_EVERY: u64 = 30;

impl<L: Lock> LeaderElector<L> {
    /// Every leadership transition from now on, with its instant and fencing token, none lost
    /// and in order (unlike [`subscribe_status`](Self::subscribe_status), a `watch` that
    /// keeps only the latest value). See [`LeadershipEvents`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeadershipEnd, LeadershipEvent, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let mut events = elector.subscribe_leadership();
    /// elector.run(CancellationToken::new(), |_| async {}).await;
    /// elector.run(CancellationToken::new(), |_| async {}).await;
    /// let mut tokens = Vec::new();
    /// while let Some(event) = events.try_recv() {
    ///     if let LeadershipEvent::Stopped { fencing_token, reason, .. } = event {
    ///         assert_eq!(reason, LeadershipEnd::WorkFinished);
    ///         tokens.push(fencing_token);
    ///     }
    /// }
    /// assert_eq!(tokens, [0, 1]);
    /// # }
    /// ```
    pub fn subscribe_leadership(&self) -> LeadershipEvents {
        self.transitions.subscribe()
    }

    /// A watch of this candidate's [`ElectorStatus`]: leading, the observed leader, lock
    /// failures (how many in a row, the last one) and the elector's counters, so a candidate
    /// that cannot reach its store, or reaches it too slowly, is visible. It keeps only the
    /// latest value; for every transition, see [`subscribe_leadership`](Self::subscribe_leadership).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let status = elector.subscribe_status();
    /// elector.run(CancellationToken::new(), |_| async {}).await;
    /// assert_eq!(status.borrow().leader, "a");
    /// assert_eq!(status.borrow().consecutive_failures, 0);
    /// # }
    /// ```
    #[must_use]
    pub fn subscribe_status(&self) -> watch::Receiver<ElectorStatus> {
        self.status.subscribe()
    }

    /// Health: unhealthy when this candidate leads but has not renewed for longer than the lease
    /// duration plus `tolerance`, as the original's watchdog.
    ///
    /// # Errors
    ///
    /// [`HealthError`] naming the election.
    pub fn check(&self, tolerance: Duration) -> Result<(), HealthError> {
        let s = self.state.lock();
        if s.record.holder_identity == self.lock.identity()
            && s.time.elapsed() > self.config.lease_duration + tolerance
        {
            return Err(HealthError {
                name: self.config.name.clone(),
            });
        }
        Ok(())
    }

    /// Publishes whether this candidate leads, with the grant's fencing token.
    pub(super) fn set_leading(&self, leading: bool, fencing: Option<u64>) {
        self.status.send_modify(|s| {
            s.leading = leading;
            s.fencing_token = fencing;
        });
        #[cfg(feature = "prometheus")]
        if let Some(m) = &self.metrics {
            m.set_leading(&self.config.name, leading);
        }
    }

    /// Publishes the holder of the last observed record as the leader.
    pub(super) fn report_leader(&self) {
        let holder = self.observed_record().holder_identity;
        self.status.send_if_modified(|s| {
            if s.leader == holder {
                return false;
            }
            debug!(leader = %holder, "new leader observed");
            s.leader = holder;
            true
        });
    }

    /// Counts a lock failure (a backend error) or a reset (any answer from the store); warns
    /// when failures persist. Returns `false`, the try's result after a failure.
    pub(super) fn note_result(&self, err: Option<LockError>, op: &'static str) -> bool {
        let Some(err) = err else {
            self.status.send_if_modified(|s| {
                let was = s.consecutive_failures;
                s.consecutive_failures = 0;
                if was >= WARN_AFTER {
                    warn!(failures = was, "lock answers again");
                }
                was != 0
            });
            return false;
        };
        if !matches!(err, LockError::Backend(_)) {
            // A lost race or a record that moved: the store answered.
            debug!(error = %err, op, "lock operation refused");
            self.note_result(None, op);
            return false;
        }
        #[cfg(feature = "prometheus")]
        if let Some(m) = &self.metrics {
            m.lock_error(&self.config.name);
        }
        let err = Arc::new(err);
        self.status.send_modify(|s| {
            s.lock_errors += 1;
            s.consecutive_failures += 1;
            let n = s.consecutive_failures;
            if n == WARN_AFTER || (n > WARN_AFTER && (n - WARN_AFTER).is_multiple_of(WARN_EVERY)) {
                warn!(
                    lock = %self.lock.describe(),
                    failures = n,
                    error = %ErrorChain(&err),
                    op,
                    "lock keeps failing"
                );
            } else {
                debug!(error = %ErrorChain(&err), op, "lock operation failed");
            }
            s.last_error = Some(err.clone());
        });
        false
    }
}

/// Displays an error with its sources, `a: b: c`.
struct ErrorChain<'a>(&'a LockError);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = std::error::Error::source(self.0);
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}
