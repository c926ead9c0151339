//! What the leading work holds ([`Leadership`]) and why it ended ([`LeadershipEnd`]).

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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
    /// The [`run`](crate::LeaderElector::run) future was dropped while leading: renewing stopped
    /// with it, and the lease was neither renewed again nor released; it expires.
    RunDropped,
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
    /// [`valid_until`](Self::valid_until), moved on by every successful renew.
    until: Arc<watch::Sender<Instant>>,
}

impl Leadership {
    pub(crate) fn new(fencing: u64, valid_until: Instant) -> Self {
        Self {
            token: CancellationToken::new(),
            fencing,
            end: Arc::default(),
            until: Arc::new(watch::Sender::new(valid_until)),
        }
    }

    /// Moves [`valid_until`](Self::valid_until) on after a successful renew.
    pub(crate) fn extend(&self, valid_until: Instant) {
        // The elector's renew loop is the only writer.
        if valid_until > self.valid_until() {
            self.until.send_replace(valid_until);
        }
    }

    /// The instant, on this process's tokio clock, until which this grant holds: retry period +
    /// renew deadline after the last successful renew (or the acquire) was sent. No other
    /// candidate can take the lease over before it: a follower waits a lease duration after it
    /// saw that renew, and the configuration keeps the lease duration above retry period +
    /// renew deadline.
    ///
    /// The elector stops leading when a renew cannot succeed before this instant, but only when
    /// its task runs: a process that was frozen (stopped by a signal, throttled, paused with its
    /// VM) resumes with its token not yet fired. Check [`is_current`](Self::is_current) before
    /// starting work that must not overlap another leader's; what was already running when the
    /// freeze began is what the [fencing token](Self::fencing_token) is for.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// # use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let config = LeaderElectionConfig::default(); // 15 s / 10 s / 2 s
    /// # let elector = LeaderElector::new(MemoryStore::new().lock("a"), config).unwrap();
    /// let start = tokio::time::Instant::now();
    /// elector.run(CancellationToken::new(), |l| async move {
    ///     assert_eq!(l.valid_until(), start + std::time::Duration::from_secs(12));
    /// }).await;
    /// # }
    /// ```
    #[must_use]
    pub fn valid_until(&self) -> Instant {
        *self.until.borrow()
    }

    /// Whether this grant holds for new work now: its [token](Self::token) has not fired (no
    /// loss, no stop request) and [`valid_until`](Self::valid_until) has not passed on this
    /// process's clock. Ask it right before starting work that must not overlap another
    /// leader's (the runner's workers ask it before every reconcile).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// # use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// # let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let kept = elector.run(CancellationToken::new(), |l| async move {
    ///     assert!(l.is_current());
    ///     l
    /// }).await.unwrap();
    /// assert!(!kept.is_current(), "the run returned: leadership ended");
    /// # }
    /// ```
    #[must_use]
    pub fn is_current(&self) -> bool {
        !self.token.is_cancelled() && Instant::now() < self.valid_until()
    }

    /// Waits until this grant [is current](Self::is_current) and returns `true`, or returns
    /// `false` once its [token](Self::token) has fired. Returns at once while it is current;
    /// after a freeze it waits for the elector's task to run: a renew whose answer arrived in
    /// time extends the grant, else leadership ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
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
    ///     while l.current().await {
    ///         // start one piece of leader-only work
    /// #       break;
    ///     }
    /// }).await;
    /// # }
    /// ```
    pub async fn current(&self) -> bool {
        let mut until = self.until.subscribe();
        tokio::select! {
            biased;
            () = self.token.cancelled() => false,
            // A renew moves `valid_until` on (`self` holds the sender, so the wait cannot fail).
            current = until.wait_for(|until| Instant::now() < *until) => current.is_ok(),
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
        let mut end = self.end.lock();
        // Only a loss can follow a stop request (the elector's drain ends on a loss, the work
        // returning, or the grace period, and only a loss records a new reason).
        if matches!(*end, None | Some(LeadershipEnd::StopRequested)) {
            *end = Some(reason);
        }
        drop(end);
        self.token.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance, timeout};

    use super::{Leadership, LeadershipEnd};

    const S: Duration = Duration::from_secs(1);

    /// The grant holds strictly before `valid_until`, not at it, whatever the elector does.
    #[tokio::test(start_paused = true)]
    async fn a_grant_is_current_strictly_before_valid_until() {
        let l = Leadership::new(3, Instant::now() + S);
        assert!(l.is_current());
        advance(S - Duration::from_nanos(1)).await;
        assert!(l.is_current());
        advance(Duration::from_nanos(1)).await;
        assert!(!l.is_current(), "at valid_until the grant no longer holds");
        l.end(LeadershipEnd::StopRequested);
        l.extend(Instant::now() + S);
        assert!(
            !l.is_current(),
            "a fired token ends it whatever the instant"
        );
    }

    /// `extend` only moves the instant on, and tells a waiting `current` only then.
    #[tokio::test(start_paused = true)]
    async fn extend_moves_valid_until_on_only() {
        let start = Instant::now();
        let l = Leadership::new(0, start + S);
        l.extend(start + S / 2);
        assert_eq!(l.valid_until(), start + S);
        let seen = l.until.subscribe();
        l.extend(start + S);
        assert!(
            !seen.has_changed().unwrap(),
            "the same instant is no change"
        );
        l.extend(start + S * 2);
        assert_eq!(l.valid_until(), start + S * 2);
        assert!(seen.has_changed().unwrap());
    }

    /// `current` answers at once while the grant holds; once it lapsed, it waits for a renew
    /// (then `true`) or for the token (then `false`).
    #[tokio::test(start_paused = true)]
    async fn current_waits_for_a_renew_or_the_end() {
        let l = Leadership::new(0, Instant::now() + S);
        assert!(l.current().await);
        advance(S).await;
        let waiting = timeout(S, l.current()).await;
        assert!(
            waiting.is_err(),
            "lapsed and neither renewed nor ended: it waits"
        );
        let renewer = l.clone();
        let renew = async move {
            tokio::time::sleep(S / 2).await;
            renewer.extend(Instant::now() + S);
        };
        let (current, ()) = tokio::join!(l.current(), renew);
        assert!(current, "a renew made it current again");
        advance(S).await;
        let ender = l.clone();
        let end = async move {
            tokio::time::sleep(S / 2).await;
            ender.end(LeadershipEnd::LostToOther);
        };
        let (current, ()) = tokio::join!(l.current(), end);
        assert!(!current, "the token fired");
        assert_eq!(l.fencing_token(), 0);
    }
}
