//! The elector: acquire, renew, step down, release.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span};

use crate::config::JITTER_FACTOR;
use crate::jitter::Jitter;
use crate::{ConfigError, HealthError, LeaderElectionConfig, LeaderRecord, Lock, LockError};

/// Keeps at most one candidate leading among those sharing a lock.
///
/// Expiry is judged by when this candidate last saw the record's version change, on its own
/// `tokio::time` clock; an empty holder is free. While leading, every renew is bounded by a
/// deadline of retry period + renew deadline measured from before the last successful renew was
/// sent; leadership ends at once when that passes or a renew sees another valid holder, which
/// is before any follower (whose clock starts after that send) can take over.
///
/// # Examples
///
/// ```
/// use leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
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
    slow_path: AtomicU64,
}

/// What the leading work receives.
///
/// # Examples
///
/// ```
/// # use leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
/// # use tokio_util::sync::CancellationToken;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
/// elector.run(CancellationToken::new(), |l| async move {
///     assert!(!l.token().is_cancelled());
///     assert_eq!(l.fencing_token(), 0);
/// }).await;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Leadership {
    token: CancellationToken,
    fencing: u32,
}

#[derive(Debug)]
struct Observed {
    record: LeaderRecord,
    version: Option<String>,
    time: Instant,
    jitter: Jitter,
}

impl Leadership {
    /// Fires when leadership ends; stop acting as leader at once.
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The leader transitions at acquisition: strictly increasing per term while the record is
    /// not deleted. Guard writes with it where the resource can check it.
    #[must_use]
    pub fn fencing_token(&self) -> u32 {
        self.fencing
    }
}

impl<L: Lock> LeaderElector<L> {
    /// Validates `config` and builds an elector over `lock`.
    ///
    /// # Errors
    ///
    /// The [`ConfigError`] of the first broken rule, or [`ConfigError::EmptyIdentity`].
    pub fn new(lock: L, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        if lock.identity().is_empty() {
            return Err(ConfigError::EmptyIdentity);
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
                jitter: Jitter::new(seed),
            }),
            leader_tx: watch::Sender::new(String::new()),
            leading_tx: watch::Sender::new(false),
            slow_path: AtomicU64::new(0),
        })
    }

    /// Acquires the lease, runs `work` while leading, then stops. Returns `None` if `cancel`
    /// fired before the lease was acquired, else the work's output.
    ///
    /// Leadership ends when `work` returns, when `cancel` fires, or when renewing fails; the
    /// work's [`Leadership::token`] fires and the work is awaited to completion. Then, if
    /// configured, the lease is released, only if the fetched record still names us.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future drops the work; the lease is not released and expires.
    pub async fn run<F, Fut>(&self, cancel: CancellationToken, work: F) -> Option<Fut::Output>
    where
        F: FnOnce(Leadership) -> Fut,
        Fut: Future,
    {
        let span = debug_span!("leader_election", lock = %self.lock.describe());
        async {
            let sent = self.acquire(&cancel).await?;
            let token = CancellationToken::new();
            let fencing = self.observed_record().leader_transitions;
            self.leading_tx.send_replace(true);
            debug!(identity = self.lock.identity(), fencing, "started leading");
            let work = work(Leadership {
                token: token.clone(),
                fencing,
            });
            tokio::pin!(work);
            let out = tokio::select! {
                out = &mut work => { token.cancel(); Some(out) }
                () = self.renew(sent, &cancel) => { token.cancel(); None }
            };
            let out = match out {
                Some(o) => o,
                None => work.await,
            };
            self.leading_tx.send_replace(false);
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
                ok = self.try_acquire_or_renew() => ok,
            };
            self.report_leader();
            if ok {
                return Some(sent);
            }
            let rp = self.config.retry_period;
            let extra = rp.mul_f64(self.lock_state().jitter.next_f64() * JITTER_FACTOR);
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = sleep(rp + extra) => {}
            }
        }
    }

    /// Renews until a renew cannot succeed before `last_sent + retry period + renew deadline`,
    /// a renew sees another holder, or `cancel` fires.
    async fn renew(&self, mut last_sent: Instant, cancel: &CancellationToken) {
        let rp = self.config.retry_period;
        loop {
            let deadline = last_sent + rp + self.config.renew_deadline;
            tokio::select! {
                () = cancel.cancelled() => return,
                () = sleep(rp) => {}
            }
            loop {
                let sent = Instant::now();
                let attempt = timeout_at(deadline, self.try_acquire_or_renew());
                let ok = tokio::select! {
                    () = cancel.cancelled() => return,
                    r = attempt => r,
                };
                self.report_leader();
                match ok {
                    Ok(true) => {
                        last_sent = sent;
                        break;
                    }
                    Err(_) => {
                        debug!("renew deadline passed");
                        return;
                    }
                    Ok(false) if !self.is_leader() => {
                        debug!(holder = %self.observed_record().holder_identity, "lost the lease");
                        return;
                    }
                    Ok(false) => {}
                }
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = sleep_until((sent + rp).min(deadline)) => {}
                }
                if Instant::now() >= deadline {
                    debug!("renew deadline passed");
                    return;
                }
            }
        }
    }

    /// One try, as the original's `tryAcquireOrRenew`: the fast path while leading, else get and
    /// create or take over.
    async fn try_acquire_or_renew(&self) -> bool {
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
        if self.is_leader() && self.is_lease_valid(now) {
            let old = self.observed_record();
            rec.acquire_time = old.acquire_time;
            rec.leader_transitions = old.leader_transitions;
            match self.lock.update(rec.clone()).await {
                Ok(v) => return self.observe(rec, v, now),
                Err(e) => debug!(error = %e, "fast path update failed, falling back to get"),
            }
        }
        let old = match self.lock.get().await {
            Ok(v) => v,
            Err(LockError::NotFound) => {
                return match self.lock.create(rec.clone()).await {
                    Ok(v) => self.observe(rec, v, now),
                    Err(e) => {
                        debug!(error = %e, "create failed");
                        false
                    }
                };
            }
            Err(e) => {
                debug!(error = %e, "get failed");
                return false;
            }
        };
        {
            let mut s = self.lock_state();
            if s.version.as_deref() != Some(&old.version) {
                s.record = old.record.clone();
                s.version = Some(old.version.clone());
                s.time = Instant::now();
            }
        }
        let holder = &old.record.holder_identity;
        if !holder.is_empty() && holder != self.lock.identity() && self.is_lease_valid(now) {
            return false;
        }
        if holder == self.lock.identity() {
            rec.acquire_time = old.record.acquire_time;
            rec.leader_transitions = old.record.leader_transitions;
            self.slow_path.fetch_add(1, Ordering::Relaxed);
        } else {
            rec.leader_transitions = old.record.leader_transitions.saturating_add(1);
        }
        match self.lock.update(rec.clone()).await {
            Ok(v) => self.observe(rec, v, now),
            Err(e) => {
                debug!(error = %e, "update failed");
                false
            }
        }
    }

    /// Records our own successful write; our clock for it starts at `sent`, before the request.
    fn observe(&self, rec: LeaderRecord, version: String, sent: Instant) -> bool {
        let mut s = self.lock_state();
        s.record = rec;
        s.version = Some(version);
        s.time = sent;
        true
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

    /// Whether the last observed record names this candidate.
    #[must_use]
    pub fn is_leader(&self) -> bool {
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

    /// A watch of whether this candidate is leading: `true` when it starts, `false` when it stops.
    #[must_use]
    pub fn subscribe_leading(&self) -> watch::Receiver<bool> {
        self.leading_tx.subscribe()
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

    fn report_leader(&self) {
        let holder = self.observed_record().holder_identity;
        self.leader_tx.send_if_modified(|cur| {
            if *cur == holder {
                return false;
            }
            debug!(leader = %holder, "new leader observed");
            *cur = holder;
            true
        });
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
