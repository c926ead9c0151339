//! What the leading work holds ([`Leadership`]), why it ended ([`LeadershipEnd`]), and what a
//! candidate publishes about its election ([`ElectorStatus`]).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::LockError;

/// Why a [`Leadership`] ended.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::LeadershipEnd;
/// let shutdown = |end: Option<LeadershipEnd>| end == Some(LeadershipEnd::StopRequested);
/// assert!(!shutdown(Some(LeadershipEnd::LostToOther)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipEnd {
    /// The `cancel` token given to [`LeaderElector::run`](crate::LeaderElector::run) fired: the
    /// lease is still held and renewed while the work drains, for at most the grace period.
    StopRequested,
    /// A renew found another candidate holding the lease.
    LostToOther,
    /// No renew succeeded before the renew deadline (the store is unreachable, slow or failing).
    RenewDeadlinePassed,
    /// The work returned on its own.
    WorkFinished,
}

impl LeadershipEnd {
    /// Whether the lease was lost (rather than given up): stop acting at once.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(ctrlq_leader::LeadershipEnd::LostToOther.is_loss());
    /// assert!(!ctrlq_leader::LeadershipEnd::StopRequested.is_loss());
    /// ```
    #[must_use]
    pub fn is_loss(self) -> bool {
        matches!(self, Self::LostToOther | Self::RenewDeadlinePassed)
    }
}

/// What the leading work receives.
///
/// # Examples
///
/// ```
/// # use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
/// # use tokio_util::sync::CancellationToken;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
/// elector.run(CancellationToken::new(), |l| async move {
///     assert!(!l.token().is_cancelled());
///     assert_eq!(l.end_reason(), None);
///     assert_eq!(l.fencing_token(), 0);
/// }).await;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Leadership {
    token: CancellationToken,
    fencing: u64,
    end: Arc<Mutex<Option<LeadershipEnd>>>,
}

impl Leadership {
    pub(crate) fn new(fencing: u64) -> Self {
        Self {
            token: CancellationToken::new(),
            fencing,
            end: Arc::default(),
        }
    }

    /// Fires when leadership ends or is asked to end; see [`end_reason`](Self::end_reason) for
    /// why. On a loss stop acting as leader at once; on a stop request finish (drain) and
    /// return: the lease is renewed until then, within the grace period.
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The fencing token of this grant: strictly greater than that of every earlier grant on the
    /// same record, to any candidate, including this one acquiring again. Guard writes with it
    /// where the resource can check it. What it is derived from depends on the lock
    /// ([`Lock::fencing_token`](crate::Lock::fencing_token)): the leader transitions count for
    /// the in-memory and the Kubernetes Lease locks, the etcd revision of the acquiring write for
    /// the etcd lock.
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.fencing
    }

    /// Why leadership ended; `None` while still leading and not asked to stop. A loss during a
    /// drain replaces [`LeadershipEnd::StopRequested`].
    #[must_use]
    pub fn end_reason(&self) -> Option<LeadershipEnd> {
        *self.end.lock()
    }

    /// Records `reason` unless an earlier one stands; a loss during a drain overrides the stop
    /// request.
    pub(crate) fn end(&self, reason: LeadershipEnd) {
        {
            let mut end = self.end.lock();
            match *end {
                None => *end = Some(reason),
                // Only a loss can follow a stop request (the elector's drain ends on a loss, the
                // work returning, or the grace period, and only a loss records a new reason).
                Some(LeadershipEnd::StopRequested) => *end = Some(reason),
                Some(_) => {}
            }
        }
        self.token.cancel();
    }
}

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
}
