//! The elector: acquire, renew, drain, step down, release.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use crate::config::JITTER_FACTOR;
use crate::events::{LeadershipEvents, Transitions};
use crate::jitter::Jitter;
use crate::{
    ConfigError, ElectorStatus, HealthError, LeaderElectionConfig, LeaderRecord, Leadership,
    LeadershipEnd, Lock, LockError, Versioned,
};

/// After this many lock failures in a row the elector logs a warning (and again every
/// [`WARN_EVERY`] failures while they last); each single failure is a `debug!`.
const WARN_AFTER: u64 = 3;
const WARN_EVERY: u64 = 30;

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
/// [`late_acquire_count`](Self::late_acquire_count).
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
/// elector's included: when it resumes, its [`Leadership::token`] has not fired yet, though
/// another candidate may lead by then. [`Leadership::is_current`] answers on the process's own
/// clock: ask it before starting leader-only work (the runner's workers do before every
/// reconcile). Work already running when the freeze began resumes mid-way: that is what the
/// [fencing token](Leadership::fencing_token) is for.
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
/// let mut leader = elector.subscribe_leader();
/// elector.run(CancellationToken::new(), |_| async {}).await;
/// assert_eq!(*leader.borrow_and_update(), "a");
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderElector<L> {
    lock: L,
    config: LeaderElectionConfig,
    state: Mutex<Observed>,
    leader_tx: watch::Sender<String>,
    leading_tx: watch::Sender<bool>,
    status_tx: watch::Sender<ElectorStatus>,
    slow_path: AtomicU64,
    lock_errors: AtomicU64,
    late_acquires: AtomicU64,
    #[cfg(feature = "prometheus")]
    metrics: Option<Arc<crate::prometheus::LeaderMetrics>>,
    /// The subscribers of [`subscribe_leadership`](Self::subscribe_leadership).
    transitions: Transitions,
}

#[derive(Debug)]
struct Observed {
    record: LeaderRecord,
    version: Option<String>,
    time: Instant,
    /// This elector's own last successful write: its version and the term it wrote.
    written: Option<(String, Term)>,
    jitter: Jitter,
}

/// What identifies one grant in a record: its holder, its leader transitions and its acquire
/// time (to the microsecond, which every store keeps). A record naming this candidate is its
/// own when it carries the term of its own last write, even at another version: a tool that
/// labels the Lease, or a write of its own whose answer was lost, changes the version only.
/// Another process with the same identity writes another term: it acquired with more
/// transitions, at another instant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    holder: String,
    transitions: u32,
    acquired_micros: u128,
}

impl Term {
    fn of(record: &LeaderRecord) -> Self {
        Self {
            holder: record.holder_identity.clone(),
            transitions: record.leader_transitions,
            acquired_micros: record
                .acquire_time
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// Whether a try runs while acquiring or while renewing a term already held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Acquire,
    Renew,
}

impl<L: Lock> LeaderElector<L> {
    /// Validates `config` and builds an elector over `lock`.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of the first broken rule, [`ConfigError::EmptyIdentity`], or
    /// [`ConfigError::RequestTimeoutAboveRenewDeadline`] for a lock whose
    /// [request timeout](Lock::request_timeout) exceeds the renew deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// assert!(LeaderElector::new(MemoryStore::new().lock(""), LeaderElectionConfig::default()).is_err());
    /// ```
    pub fn new(lock: L, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
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
        let seed = config.jitter_seed.unwrap_or_else(|| {
            lock.identity().bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        });
        Ok(Self {
            lock,
            config,
            state: Mutex::new(Observed {
                record: LeaderRecord::default(),
                version: None,
                time: Instant::now(),
                written: None,
                jitter: Jitter::new(seed),
            }),
            leader_tx: watch::Sender::new(String::new()),
            leading_tx: watch::Sender::new(false),
            status_tx: watch::Sender::new(ElectorStatus::default()),
            slow_path: AtomicU64::new(0),
            lock_errors: AtomicU64::new(0),
            late_acquires: AtomicU64::new(0),
            #[cfg(feature = "prometheus")]
            metrics: None,
            transitions: Transitions::default(),
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
    pub fn metrics(mut self, metrics: Arc<crate::prometheus::LeaderMetrics>) -> Self {
        metrics.set_leading(&self.config.name, false);
        self.metrics = Some(metrics);
        self
    }

    /// Acquires the lease, runs `work` while leading, then stops. Returns `None` if `cancel`
    /// fired before the lease was acquired, else the work's output. Callable again after it
    /// returns, to stand for election again.
    ///
    /// - On a lost lease (a renew saw another holder, or no renew succeeded before the renew
    ///   deadline) the work's [`Leadership::token`] fires at once and renewing stops.
    /// - When `cancel` fires while leading, the token fires at once (the work drains), and the
    ///   lease is renewed until the work returns, for at most the
    ///   [grace period](LeaderElectionConfig::grace_period); then renewing stops.
    /// - When the work returns on its own, renewing stops.
    ///
    /// In every case the work is awaited to completion; then, if `cancel` fired and
    /// [`release_on_cancel`](LeaderElectionConfig::release_on_cancel) is set, the lease is
    /// released, only if the fetched record still names this candidate.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work; the lease is not released and expires. A run
    /// dropped while leading stops leading there and then: [`is_leader`](Self::is_leader) turns
    /// false and the [leadership events](Self::subscribe_leadership) get its `Stopped`, with
    /// [`LeadershipEnd::RunDropped`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeadershipEnd, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let stop = CancellationToken::new();
    /// let out = elector.run(stop.clone(), |l| async move {
    ///     stop.cancel();
    ///     l.token().cancelled().await;
    ///     l.end_reason()
    /// }).await;
    /// assert_eq!(out, Some(Some(LeadershipEnd::StopRequested)));
    /// # }
    /// ```
    pub async fn run<F, Fut>(&self, cancel: CancellationToken, work: F) -> Option<Fut::Output>
    where
        F: FnOnce(Leadership) -> Fut,
        Fut: Future,
    {
        let span = debug_span!("leader_election", lock = %self.lock.describe());
        async {
            let sent = self.acquire(&cancel).await?;
            let fencing = {
                let s = self.lock_state();
                self.lock.fencing_token(&Versioned {
                    record: s.record.clone(),
                    version: s.version.clone().unwrap_or_default(),
                })
            };
            let leadership = Leadership::new(fencing, sent + self.valid_for());
            self.set_leading(true, Some(fencing));
            self.transitions.started(fencing);
            // A dropped run stops leading too, and says so.
            let mut leading = StopLeadingOnDrop {
                elector: self,
                leadership: &leadership,
                stopped: false,
            };
            debug!(identity = self.lock.identity(), fencing, "started leading");
            let work = work(leadership.clone());
            tokio::pin!(work);
            let renew = self.renew(sent, &leadership);
            tokio::pin!(renew);
            let out = tokio::select! {
                out = &mut work => {
                    leadership.end(LeadershipEnd::WorkFinished);
                    Some(out)
                }
                reason = &mut renew => {
                    debug!(?reason, "leadership lost");
                    leadership.end(reason);
                    None
                }
                () = cancel.cancelled() => {
                    debug!(grace = ?self.config.grace_period, "stop requested; draining");
                    leadership.end(LeadershipEnd::StopRequested);
                    let grace = sleep(self.config.grace_period);
                    tokio::select! {
                        out = &mut work => Some(out),
                        reason = &mut renew => {
                            debug!(?reason, "leadership lost while draining");
                            leadership.end(reason);
                            None
                        }
                        () = grace => {
                            debug!("grace period over; no longer renewing");
                            None
                        }
                    }
                }
            };
            leading.stop();
            let out = match out {
                Some(out) => out,
                None => work.await,
            };
            debug!(identity = self.lock.identity(), "stopped leading");
            if self.config.release_on_cancel && cancel.is_cancelled() {
                self.release().await;
            }
            Some(out)
        }
        .instrument(span)
        .await
    }

    async fn acquire(&self, cancel: &CancellationToken) -> Option<Instant> {
        loop {
            let sent = Instant::now();
            let ok = tokio::select! {
                () = cancel.cancelled() => return None,
                ok = self.try_acquire_or_renew(Mode::Acquire) => ok,
            };
            self.report_leader();
            let rp = self.config.retry_period;
            let mut wait = rp;
            if ok && Instant::now() < sent + rp + self.config.renew_deadline {
                return Some(sent);
            }
            if ok {
                // Granted too late to lead: the renew deadline counted from the send has passed
                // already. Yet the write landed, so the record names this candidate with a fresh
                // version, and every other candidate's clock starts anew. Retrying after a retry
                // period would refresh it again before anyone could take over, for ever. So it
                // backs off until the record it wrote has expired for every candidate that saw
                // it: a lease duration, plus a jittered retry period for them to see the write
                // and another for their try after the expiry.
                debug!("acquired after the renew deadline; backing off");
                self.late_acquires.fetch_add(1, Ordering::Relaxed);
                wait = self.config.lease_duration + rp.mul_f64(1.0 + JITTER_FACTOR) * 2;
            }
            let extra = rp.mul_f64(self.lock_state().jitter.next_f64() * JITTER_FACTOR);
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = sleep(wait + extra) => {}
            }
        }
    }

    /// How long a grant holds after the acquire or renew that made it was sent: retry period +
    /// renew deadline ([`Leadership::valid_until`]).
    fn valid_for(&self) -> Duration {
        self.config.retry_period + self.config.renew_deadline
    }

    /// Renews until a renew cannot succeed before `last_sent + retry period + renew deadline`
    /// or a renew sees another holder; returns why it stopped. Each renew is sent a retry period
    /// after the previous successful one was sent (at once if its answer came later), and moves
    /// the leadership's [`valid_until`](Leadership::valid_until) on.
    async fn renew(&self, mut last_sent: Instant, leadership: &Leadership) -> LeadershipEnd {
        let rp = self.config.retry_period;
        loop {
            let deadline = last_sent + self.valid_for();
            sleep_until(last_sent + rp).await;
            loop {
                let sent = Instant::now();
                let ok = timeout_at(deadline, self.try_acquire_or_renew(Mode::Renew)).await;
                self.report_leader();
                match ok {
                    Ok(true) => {
                        last_sent = sent;
                        leadership.extend(sent + self.valid_for());
                        break;
                    }
                    Err(_) => {
                        debug!("renew deadline passed");
                        return LeadershipEnd::RenewDeadlinePassed;
                    }
                    Ok(false) if !self.holds_record() => {
                        debug!(holder = %self.observed_record().holder_identity, "lost the lease");
                        return LeadershipEnd::LostToOther;
                    }
                    Ok(false) => {}
                }
                sleep_until((sent + rp).min(deadline)).await;
                if Instant::now() >= deadline {
                    debug!("renew deadline passed");
                    return LeadershipEnd::RenewDeadlinePassed;
                }
            }
        }
    }

    /// One try, as the original's `tryAcquireOrRenew`: the fast path while renewing, else get
    /// and create or take over. Acquiring always starts a new term (leader transitions + 1),
    /// even when the record still names this candidate, so fencing tokens never repeat.
    async fn try_acquire_or_renew(&self, mode: Mode) -> bool {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut rec = LeaderRecord {
            holder_identity: self.lock.identity().to_owned(),
            lease_duration_seconds: u32::try_from(self.config.lease_duration.as_secs())
                .unwrap_or(u32::MAX),
            acquire_time: wall,
            renew_time: wall,
            leader_transitions: 0,
        };
        if mode == Mode::Renew && self.holds_record() && self.is_lease_valid(now) {
            let old = self.observed_record();
            rec.acquire_time = old.acquire_time;
            rec.leader_transitions = old.leader_transitions;
            match self.lock.update(rec.clone()).await {
                Ok(v) => return self.observe(rec, v, now),
                Err(e) => {
                    self.note_result(Some(e), "fast path update");
                }
            }
        }
        let old = match self.lock.get().await {
            Ok(v) => v,
            Err(LockError::NotFound) => {
                self.note_result(None, "get");
                return match self.lock.create(rec.clone()).await {
                    Ok(v) => self.observe(rec, v, now),
                    Err(e) => self.note_result(Some(e), "create"),
                };
            }
            Err(e) => return self.note_result(Some(e), "get"),
        };
        self.note_result(None, "get");
        {
            let mut s = self.lock_state();
            if s.version.as_deref() != Some(&old.version) {
                s.record = old.record.clone();
                s.version = Some(old.version.clone());
                s.time = Instant::now();
            }
        }
        // A record naming this candidate that this elector did not write is another process's
        // (the same identity used twice, or an earlier run of it): like any other holder's, it
        // is taken over only once it has expired.
        let held_by_self = self.holds_record();
        let holder = &old.record.holder_identity;
        if !holder.is_empty() && !held_by_self && self.is_lease_valid(now) {
            return false;
        }
        if mode == Mode::Renew && held_by_self {
            rec.acquire_time = old.record.acquire_time;
            rec.leader_transitions = old.record.leader_transitions;
            self.slow_path.fetch_add(1, Ordering::Relaxed);
            #[cfg(feature = "prometheus")]
            if let Some(m) = &self.metrics {
                m.slow_path(&self.config.name);
            }
        } else {
            rec.leader_transitions = old.record.leader_transitions.saturating_add(1);
        }
        match self.lock.update(rec.clone()).await {
            Ok(v) => self.observe(rec, v, now),
            Err(e) => self.note_result(Some(e), "update"),
        }
    }

    /// Counts a lock failure (a backend error) or a reset (any answer from the store); warns
    /// when failures persist. Returns `false`, the try's result after a failure.
    fn note_result(&self, err: Option<LockError>, op: &'static str) -> bool {
        let Some(err) = err else {
            self.status_tx.send_if_modified(|s| {
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
        self.lock_errors.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "prometheus")]
        if let Some(m) = &self.metrics {
            m.lock_error(&self.config.name);
        }
        let err = Arc::new(err);
        self.status_tx.send_modify(|s| {
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

    /// Records our own successful write; our clock for it starts at `sent`, before the request.
    fn observe(&self, rec: LeaderRecord, version: String, sent: Instant) -> bool {
        self.note_result(None, "write");
        let mut s = self.lock_state();
        s.written = Some((version.clone(), Term::of(&rec)));
        s.record = rec;
        s.version = Some(version);
        s.time = sent;
        true
    }

    /// Whether the observed record names this candidate in the term of this elector's own last
    /// write (see [`Term`]).
    fn holds_record(&self) -> bool {
        let s = self.lock_state();
        s.record.holder_identity == self.lock.identity()
            && s.written.as_ref().is_some_and(|(version, term)| {
                s.version.as_ref() == Some(version) || *term == Term::of(&s.record)
            })
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        let s = self.lock_state();
        s.time + Duration::from_secs(u64::from(s.record.lease_duration_seconds)) > now
    }

    async fn release(&self) {
        let deadline = Instant::now() + self.config.renew_deadline;
        let attempt = async {
            loop {
                let old = match self.lock.get().await {
                    Ok(old) => old,
                    Err(e) => return debug!(error = %e, "release: get failed"),
                };
                if old.record.holder_identity != self.lock.identity() {
                    return debug!("release: not the holder any more");
                }
                let wall = SystemTime::now();
                let rec = LeaderRecord {
                    holder_identity: String::new(),
                    lease_duration_seconds: 1,
                    acquire_time: wall,
                    renew_time: wall,
                    leader_transitions: old.record.leader_transitions,
                };
                match self.lock.update(rec.clone()).await {
                    Ok(v) => {
                        debug!("released");
                        self.observe(rec, v, Instant::now());
                        self.report_leader();
                        return;
                    }
                    Err(LockError::Conflict) => continue,
                    Err(e) => return debug!(error = %e, "release: update failed"),
                }
            }
        };
        if timeout_at(deadline, attempt).await.is_err() {
            debug!("release timed out");
        }
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
        *self.leading_tx.borrow()
    }

    /// Whether the last record this candidate observed names it as the holder. Not whether it
    /// leads now (see [`is_leader`](Self::is_leader)): the record may name it after it stopped
    /// leading, until it sees a newer one.
    #[must_use]
    pub fn record_names_me(&self) -> bool {
        self.lock_state().record.holder_identity == self.lock.identity()
    }

    /// The last observed leader record.
    #[must_use]
    pub fn observed_record(&self) -> LeaderRecord {
        self.lock_state().record.clone()
    }

    /// When this candidate last saw the record change, on its own clock; for the leader, when it
    /// sent its last successful renew.
    #[must_use]
    pub fn observed_at(&self) -> Instant {
        self.lock_state().time
    }

    /// A watch of the last observed holder identity (empty: none).
    #[must_use]
    pub fn subscribe_leader(&self) -> watch::Receiver<String> {
        self.leader_tx.subscribe()
    }

    /// A watch of whether this candidate is leading: `true` when it acquires, `false` when it
    /// stops renewing.
    #[must_use]
    pub fn subscribe_leading(&self) -> watch::Receiver<bool> {
        self.leading_tx.subscribe()
    }

    /// Every leadership transition from now on, with its instant and fencing token, none lost
    /// and in order (unlike [`subscribe_leading`](Self::subscribe_leading), a `watch` that
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

    /// The validated configuration this elector runs with.
    pub(crate) fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// A watch of this candidate's [`ElectorStatus`]: leading, the observed leader, and lock
    /// failures (how many in a row, the last one), so a candidate that cannot reach its store
    /// is visible.
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
        self.status_tx.subscribe()
    }

    /// The leading metric: 1 while leading, else 0.
    #[must_use]
    pub fn leading_metric(&self) -> u64 {
        u64::from(*self.leading_tx.borrow())
    }

    /// How many renews took the slow path (a get before the update).
    #[must_use]
    pub fn slow_path_count(&self) -> u64 {
        self.slow_path.load(Ordering::Relaxed)
    }

    /// How many lock operations failed (backend errors; lost races are not failures).
    #[must_use]
    pub fn lock_error_count(&self) -> u64 {
        self.lock_errors.load(Ordering::Relaxed)
    }

    /// How many acquires were granted only after their renew deadline had passed, so that this
    /// candidate did not lead and backed off (see [`run`](Self::run)); a store this slow for
    /// this candidate shows here.
    #[must_use]
    pub fn late_acquire_count(&self) -> u64 {
        self.late_acquires.load(Ordering::Relaxed)
    }

    /// Health: unhealthy when this candidate leads but has not renewed for longer than the lease
    /// duration plus `tolerance`, as the original's watchdog.
    ///
    /// # Errors
    ///
    /// [`HealthError`] naming the election.
    pub fn check(&self, tolerance: Duration) -> Result<(), HealthError> {
        let s = self.lock_state();
        if s.record.holder_identity == self.lock.identity()
            && s.time.elapsed() > self.config.lease_duration + tolerance
        {
            return Err(HealthError {
                name: self.config.name.clone(),
            });
        }
        Ok(())
    }

    fn set_leading(&self, leading: bool, fencing: Option<u64>) {
        self.leading_tx.send_replace(leading);
        self.status_tx.send_modify(|s| {
            s.leading = leading;
            s.fencing_token = fencing;
        });
        #[cfg(feature = "prometheus")]
        if let Some(m) = &self.metrics {
            m.set_leading(&self.config.name, leading);
        }
    }

    fn report_leader(&self) {
        let holder = self.observed_record().holder_identity;
        self.leader_tx.send_if_modified(|cur| {
            if *cur == holder {
                return false;
            }
            debug!(leader = %holder, "new leader observed");
            cur.clone_from(&holder);
            true
        });
        self.status_tx.send_if_modified(|s| {
            if s.leader == holder {
                return false;
            }
            s.leader = holder;
            true
        });
    }

    fn lock_state(&self) -> MutexGuard<'_, Observed> {
        lock(&self.state)
    }
}

/// Ends a term's leading: the status and the lossless events. A `run` dropped while leading
/// stops renewing, so it must not go on saying it leads: dropped before [`stop`](Self::stop), it
/// ends the leadership with [`LeadershipEnd::RunDropped`] and stops.
struct StopLeadingOnDrop<'a, L: Lock> {
    elector: &'a LeaderElector<L>,
    leadership: &'a Leadership,
    stopped: bool,
}

impl<L: Lock> StopLeadingOnDrop<'_, L> {
    fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            self.elector.set_leading(false, None);
            self.elector.transitions.stopped(self.leadership);
        }
    }
}

impl<L: Lock> Drop for StopLeadingOnDrop<'_, L> {
    fn drop(&mut self) {
        if !self.stopped {
            self.leadership.end(LeadershipEnd::RunDropped);
            self.stop();
        }
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
