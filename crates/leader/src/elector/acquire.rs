//! Acquiring the lease, and one try at the store (the original's `tryAcquireOrRenew`), with
//! what the elector observes of the record and how it tells its own grant from another's.

use std::time::{Duration, SystemTime};

use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::LeaderElector;
use crate::config::JITTER_FACTOR;
use crate::{LeaderRecord, Lock, LockError, Versioned};

impl<L: Lock> LeaderElector<L> {
    /// Tries every retry period (with jitter) until a grant; returns when its write was sent
    /// and the write, or `None` once `cancel` fires.
    pub(super) async fn acquire(&self, cancel: &CancellationToken) -> Option<(Instant, Versioned)> {
        let rp = self.config.retry_period;
        loop {
            let sent = Instant::now();
            let granted = cancel
                .run_until_cancelled(self.try_acquire_or_renew(false))
                .await?;
            self.reports.leader(&self.observed_record().holder_identity);
            let mut wait = rp;
            if let Some(granted) = granted {
                if Instant::now() < sent + self.valid_for() {
                    return Some((sent, granted));
                }
                // Granted too late to lead: the renew deadline counted from the send has passed
                // already. Yet the write landed, so the record names this candidate with a fresh
                // version, and every other candidate's clock starts anew. Retrying after a retry
                // period would refresh it again before anyone could take over, for ever. So it
                // backs off until the record it wrote has expired for every candidate that saw
                // it: a lease duration, plus a jittered retry period for them to see the write
                // and another for their try after the expiry.
                debug!("acquired after the renew deadline; backing off");
                self.reports.status.send_modify(|s| s.late_acquires += 1);
                wait = self.config.lease_duration + rp.mul_f64(1.0 + JITTER_FACTOR) * 2;
            }
            let extra = rp.mul_f64(self.state.lock().jitter.next_f64() * JITTER_FACTOR);
            cancel.run_until_cancelled(sleep(wait + extra)).await?;
        }
    }

    /// One try, as the original's `tryAcquireOrRenew`: the fast path while renewing, else get
    /// and create or take over. Acquiring always starts a new term (leader transitions + 1),
    /// even when the record still names this candidate, so fencing tokens never repeat.
    /// Returns this candidate's write if it landed.
    pub(super) async fn try_acquire_or_renew(&self, renewing: bool) -> Option<Versioned> {
        let now = Instant::now();
        let mut rec = LeaderRecord::new(self.lock.identity(), self.config.lease_duration, 0);
        if renewing && self.holds_record() && self.is_lease_valid(now) {
            let held = self.observed_record();
            rec.acquire_time = held.acquire_time;
            rec.leader_transitions = held.leader_transitions;
            let written = self.lock.update(rec.clone()).await;
            if let Some(v) = self.reports.answered(written, "fast path update") {
                return Some(self.observe_write(rec, v, now));
            }
        }
        let old = match self.lock.get().await {
            Err(LockError::NotFound) => {
                self.reports.store_answers();
                let v = self
                    .reports
                    .answered(self.lock.create(rec.clone()).await, "create")?;
                return Some(self.observe_write(rec, v, now));
            }
            got => self.reports.answered(got, "get")?,
        };
        self.observe(&old);
        // A record naming this candidate that this elector did not write is another process's
        // (the same identity used twice, or an earlier run of it): like any other holder's, it
        // is taken over only once it has expired.
        let held_by_self = self.holds_record();
        if !old.record.is_free() && !held_by_self && self.is_lease_valid(now) {
            return None;
        }
        if renewing && held_by_self {
            rec.acquire_time = old.record.acquire_time;
            rec.leader_transitions = old.record.leader_transitions;
            self.reports.slow_path();
        } else {
            rec.leader_transitions = old.record.leader_transitions.saturating_add(1);
        }
        let v = self
            .reports
            .answered(self.lock.update(rec.clone()).await, "update")?;
        Some(self.observe_write(rec, v, now))
    }

    /// Takes in a record read from the store; this candidate's clock for it restarts when its
    /// version changed.
    fn observe(&self, read: &Versioned) {
        let mut s = self.state.lock();
        if s.version.as_ref() != Some(&read.version) {
            s.record = read.record.clone();
            s.version = Some(read.version.clone());
            s.time = Instant::now();
        }
    }

    /// Records this elector's own successful write, sent at `sent`, and returns it.
    pub(super) fn observe_write(
        &self,
        record: LeaderRecord,
        version: String,
        sent: Instant,
    ) -> Versioned {
        let mut s = self.state.lock();
        s.written = Some((version.clone(), record.clone()));
        s.record = record.clone();
        s.version = Some(version.clone());
        s.time = sent;
        Versioned { record, version }
    }

    /// Whether the observed record names this candidate in the term of this elector's own last
    /// write: at that write's version, or at another version but with the same holder, leader
    /// transitions and acquire time to the microsecond (which every store keeps). A tool that
    /// labels the Lease, or a write of its own whose answer was lost, changes the version only;
    /// another process with the same identity acquires with more transitions, at another
    /// instant.
    pub(super) fn holds_record(&self) -> bool {
        fn term(r: &LeaderRecord) -> (&str, u32, u128) {
            let acquired = r.acquire_time.duration_since(SystemTime::UNIX_EPOCH);
            let micros = acquired.map_or(0, |d| d.as_micros());
            (&r.holder_identity, r.leader_transitions, micros)
        }
        let s = self.state.lock();
        s.record.holder_identity == self.lock.identity()
            && s.written.as_ref().is_some_and(|(version, written)| {
                s.version.as_ref() == Some(version) || term(written) == term(&s.record)
            })
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        let s = self.state.lock();
        s.time + Duration::from_secs(u64::from(s.record.lease_duration_seconds)) > now
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance, timeout};

    use crate::{LeaderElectionConfig, LeaderElector, LeaderRecord, Lock, MemoryStore};

    /// `fut`'s output within an hour of paused time: a broken try fails the test rather than
    /// hanging it.
    async fn bounded<F: std::future::Future>(fut: F) -> F::Output {
        timeout(Duration::from_secs(3600), fut)
            .await
            .expect("done within the bound")
    }

    /// Another holder's lease is valid strictly before the observation plus its duration, as
    /// client-go's `isLeaseValid` (`observedTime + leaseDuration` after `now`): at that instant
    /// it has expired, and a try takes it over.
    #[tokio::test(start_paused = true)]
    async fn a_foreign_lease_expires_at_its_observation_plus_its_duration() {
        let store = MemoryStore::new();
        let other = LeaderRecord {
            holder_identity: "other".into(),
            lease_duration_seconds: 3,
            ..Default::default()
        };
        store.lock("other").create(other).await.unwrap();
        let e = LeaderElector::new(store.lock("me"), LeaderElectionConfig::default()).unwrap();
        assert!(bounded(e.try_acquire_or_renew(false)).await.is_none());
        let expiry = e.observed_at() + Duration::from_secs(3);
        assert!(e.is_lease_valid(expiry - Duration::from_nanos(1)));
        assert!(!e.is_lease_valid(expiry));
        advance(expiry.saturating_duration_since(Instant::now())).await;
        assert_eq!(Instant::now(), expiry);
        let taken = bounded(e.try_acquire_or_renew(false))
            .await
            .expect("expired: taken");
        assert_eq!(taken.record.holder_identity, "me");
        assert_eq!(taken.record.leader_transitions, 1);
    }
}
