//! The elector: a candidate for one lease. This file holds the type, what it observes of the
//! record and what it publishes about itself (the status watch, the lossless leadership events,
//! the health check); the protocol is split by behaviour: acquiring and one try at the store
//! (`acquire`), and a term from acquisition to its end, renewing and releasing, and standing
//! again (`run`).

#[cfg(feature = "prometheus")]
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::jitter::Jitter;
use crate::status::Reports;
use crate::{
    ConfigError, ElectorStatus, HealthError, LeaderElectionConfig, LeaderRecord, LeadershipEvents,
    Lock,
};

mod acquire;
mod run;

/// Keeps at most one candidate leading among those sharing a lock.
///
/// Expiry is judged by when this candidate last saw the record's version change, on its own
/// `tokio::time` clock; an empty holder is free. While leading, every renew is bounded by a
/// deadline of retry period + renew deadline measured from before the last successful renew was
/// sent; leadership ends at once when that passes or a renew sees another valid holder, which
/// is before any follower (whose clock starts after that send) can take over.
///
/// # One process per identity
///
/// A record that names this candidate but that this elector did not write (another process
/// started with the same identity, or an earlier run of this one) counts as another holder's:
/// it is taken over only once it has not changed for a lease duration on this candidate's
/// clock. So a second process with an identity in use never leads while the first renews, and
/// a process restarted after a crash leads again at the earliest a lease duration after it first
/// reads the record its earlier run left (at most lease duration + retry period with jitter,
/// while no other candidate takes over first).
///
/// # Timing budget
///
/// A leader that loses the store stops at most retry period + renew deadline after it sent its
/// last successful renew (12 s with the defaults); followers can take over at the earliest a
/// lease duration after they saw that renew (15 s). The difference (3 s with the defaults,
/// enforced positive by [`LeaderElectionConfig::validate`]) is the margin for clock rate
/// differences and for the work to notice its token.
///
/// Beside client-go candidates on one Lease (`LeaseLock`, feature `kube`): client-go's followers
/// compare the record at whole-second precision, so two renews within the same second look
/// unchanged to them, and a Go follower may take over up to one retry period early when the
/// retry period is under a second. The margin holds in a mixed deployment when the retry period
/// is at least 1 s (the default is 2 s), or else when lease duration − renew deadline − retry
/// period ≥ retry period.
///
/// Renews are sent a retry period after the previous renew was *sent* (at once if its answer
/// came later), so a leader keeps leading while each request takes less than
/// (retry period + renew deadline) / 2: 6 s with the defaults. client-go keeps leading up to
/// a latency of the renew deadline (10 s), but its leader may then act for up to twice the renew
/// deadline plus the retry period after its last renew was sent, past the lease duration; no
/// scheme that stops before followers may take over can stay leading above half the lease
/// duration (7.5 s).
///
/// # A candidate that cannot lead does not block the others
///
/// An acquire whose answer comes back after its renew deadline (counted, as for a renew, from
/// when it was sent) is granted too late to lead: the candidate does not lead on it. Its write
/// did land, though, and names it with a fresh version, which restarts every other candidate's
/// clock. So instead of retrying after a retry period (which would refresh the record before
/// anyone could take over, for as long as its store stays that slow), it backs off for a lease
/// duration plus twice the longest jittered retry period (23.8 s with the defaults), long enough
/// for a healthy candidate to see the record expire and take over. The count of such acquires is
/// [`ElectorStatus::late_acquires`].
///
/// # Reconciles that never await
///
/// The bound above holds while the elector's task gets polled. The runner's workers give their
/// thread back after every reconcile that never awaited something pending, and every future of
/// `ctrlq`'s queues spends tokio's cooperative budget. A reconcile that computes without
/// awaiting for longer than the margin (lease duration − renew deadline − retry period) still
/// blocks its runtime thread that long: on a current-thread runtime, or when every worker thread
/// is busy that way, the renew and the stop wait for it, and the bound is lost by that much. Run
/// such work with `tokio::task::spawn_blocking` (or `block_in_place`), or run the elector on
/// its own runtime.
///
/// # A frozen process
///
/// A process that is frozen (stopped by a signal, throttled, its VM paused) runs no task, the
/// elector's included: when it resumes, its [`crate::Leadership::token`] has not fired yet, though
/// another candidate may lead by then. [`crate::Leadership::is_current`] answers on the process's own
/// clock: ask it before starting leader-only work (the runner's workers do before every
/// reconcile). Work already running when the freeze began resumes mid-way: that is what the
/// [fencing token](crate::Leadership::fencing_token) is for.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
/// use tokio_util::sync::CancellationToken;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let elector = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
/// let status = elector.subscribe_status();
/// elector.run(CancellationToken::new(), |_| async {}).await;
/// assert_eq!(status.borrow().leader, "a");
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderElector<L> {
    lock: L,
    config: LeaderElectionConfig,
    state: Mutex<Observed>,
    /// The status watch, the leadership events and the metrics.
    reports: Reports,
}

#[derive(Debug)]
struct Observed {
    record: LeaderRecord,
    version: Option<String>,
    /// When this candidate last saw the record change (or sent its own write), on its clock.
    time: Instant,
    /// This elector's own last successful write: its version and the record it wrote.
    written: Option<(String, LeaderRecord)>,
    jitter: Jitter,
}

impl<L: Lock> LeaderElector<L> {
    /// Validates `config` and builds an elector over `lock`, whose default request bound is
    /// first fitted to the renew deadline ([`Lock::fit_request_timeout`]).
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of the first broken rule, [`ConfigError::EmptyIdentity`], or
    /// [`ConfigError::RequestTimeoutAboveRenewDeadline`] for a lock whose explicitly set
    /// [request timeout](Lock::request_timeout) exceeds the renew deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// assert!(LeaderElector::new(MemoryStore::new().lock(""), LeaderElectionConfig::default()).is_err());
    /// ```
    pub fn new(mut lock: L, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        lock.fit_request_timeout(config.renew_deadline);
        if lock.identity().is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if let Some(request_timeout) = lock.request_timeout()
            && request_timeout > config.renew_deadline
        {
            return Err(ConfigError::RequestTimeoutAboveRenewDeadline {
                request_timeout,
                renew_deadline: config.renew_deadline,
            });
        }
        // FNV-1a of the identity: candidates that share a configuration jitter apart.
        let seed = config.jitter_seed.unwrap_or_else(|| {
            lock.identity().bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        });
        Ok(Self {
            state: Mutex::new(Observed {
                record: LeaderRecord::default(),
                version: None,
                time: Instant::now(),
                written: None,
                jitter: Jitter::new(seed),
            }),
            reports: Reports {
                lock: lock.describe(),
                ..Reports::default()
            },
            lock,
            config,
        })
    }

    /// Reports this elector's leading state and slow-path renews to `metrics`, under the
    /// configured election name; the status gauge starts at 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// let metrics = ctrlq_leader::prometheus::LeaderMetrics::register(&mut registry);
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default())
    ///     .unwrap()
    ///     .metrics(metrics);
    /// # drop(elector);
    /// ```
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    #[must_use]
    pub fn metrics(self, metrics: Arc<crate::prometheus::LeaderMetrics>) -> Self {
        self.attach_metrics(metrics);
        self
    }

    /// Reports to `metrics` from now on, as [`metrics`](Self::metrics) does, on an elector
    /// already shared (a controller attaches its [`LeaderMetrics`](crate::prometheus::LeaderMetrics)
    /// this way); `false`, and nothing changes, when it already reports to some.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// let metrics = ctrlq_leader::prometheus::LeaderMetrics::register(&mut registry);
    /// let elector = Arc::new(LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap());
    /// assert!(elector.attach_metrics(metrics.clone()));
    /// assert!(!elector.attach_metrics(metrics));
    /// ```
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    pub fn attach_metrics(&self, metrics: Arc<crate::prometheus::LeaderMetrics>) -> bool {
        let name = self.config.name.clone();
        let attached = self.reports.metrics.set((metrics.clone(), name)).is_ok();
        if attached {
            metrics.set_leading(&self.config.name, self.is_leader());
        }
        attached
    }

    /// This candidate's identity (the lock's).
    #[must_use]
    pub fn identity(&self) -> &str {
        self.lock.identity()
    }

    /// The lock this elector runs on.
    #[must_use]
    pub fn lock(&self) -> &L {
        &self.lock
    }

    /// Whether this candidate leads now: `true` from when [`run`](Self::run) acquires the lease
    /// until it stops renewing (a lost lease, a passed renew deadline, the end of the drain, or
    /// the run dropped). This is what to ask before acting as the leader.
    ///
    /// A candidate that stopped leading may still be named by the record it last saw (a
    /// partitioned former leader sees no newer one): that is
    /// [`record_names_me`](Self::record_names_me), which says nothing about leading now.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let leading_inside = elector.run(CancellationToken::new(), |_| async { true }).await;
    /// assert_eq!(leading_inside, Some(true));
    /// assert!(!elector.is_leader(), "the run returned: no longer leading");
    /// assert!(elector.record_names_me(), "though the record it wrote still names it");
    /// # }
    /// ```
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.reports.status.borrow().leading
    }

    /// Whether the last record this candidate observed names it as the holder. Not whether it
    /// leads now (see [`is_leader`](Self::is_leader)): the record may name it after it stopped
    /// leading, until it sees a newer one.
    #[must_use]
    pub fn record_names_me(&self) -> bool {
        self.state.lock().record.holder_identity == self.lock.identity()
    }

    /// The last observed leader record.
    #[must_use]
    pub fn observed_record(&self) -> LeaderRecord {
        self.state.lock().record.clone()
    }

    /// When this candidate last saw the record change, on its own clock; for the leader, when it
    /// sent its last successful renew.
    #[must_use]
    pub fn observed_at(&self) -> Instant {
        self.state.lock().time
    }

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
        self.reports.subscribe_leadership()
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
        self.reports.status.subscribe()
    }

    /// Health: unhealthy when this candidate leads but has not renewed for longer than the lease
    /// duration plus `tolerance`, as the original's watchdog.
    ///
    /// # Errors
    ///
    /// [`HealthError`] naming the election.
    pub fn check(&self, tolerance: Duration) -> Result<(), HealthError> {
        let s = self.state.lock();
        let stale = s.time.elapsed() > self.config.lease_duration + tolerance;
        if stale && s.record.holder_identity == self.lock.identity() {
            let name = self.config.name.clone();
            return Err(HealthError { name });
        }
        Ok(())
    }
}
