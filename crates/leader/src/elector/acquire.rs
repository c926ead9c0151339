//! Acquiring the lease, and one try at the store (the original's `tryAcquireOrRenew`), with
//! what the elector observes of the record and how it tells its own grant from another's.

use std::time::{Duration, SystemTime};

use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::LeaderElector;
use crate::config::JITTER_FACTOR;
use crate::{LeaderRecord, Lock, LockError};

/// What identifies one grant in a record: its holder, its leader transitions and its acquire
/// time (to the microsecond, which every store keeps). A record naming this candidate is its
/// own when it carries the term of its own last write, even at another version: a tool that
/// labels the Lease, or a write of its own whose answer was lost, changes the version only.
/// Another process with the same identity writes another term: it acquired with more
/// transitions, at another instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Term {
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

/// Whether a try runs while acquiring or while renewing a term already held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Acquire,
    Renew,
}

impl<L: Lock> LeaderElector<L> {
    /// Tries every retry period (with jitter) until a grant; returns when its write was sent,
    /// or `None` once `cancel` fires.
    pub(super) async fn acquire(&self, cancel: &CancellationToken) -> Option<Instant> {
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
                self.status.send_modify(|s| s.late_acquires += 1);
                wait = self.config.lease_duration + rp.mul_f64(1.0 + JITTER_FACTOR) * 2;
            }
            let extra = rp.mul_f64(self.state.lock().jitter.next_f64() * JITTER_FACTOR);
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = sleep(wait + extra) => {}
            }
        }
    }

    /// One try, as the original's `tryAcquireOrRenew`: the fast path while renewing, else get
    /// and create or take over. Acquiring always starts a new term (leader transitions + 1),
    /// even when the record still names this candidate, so fencing tokens never repeat.
    pub(super) async fn try_acquire_or_renew(&self, mode: Mode) -> bool {
        let now = Instant::now();
        let mut rec = LeaderRecord::new(self.lock.identity(), self.config.lease_duration, 0);
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
            let mut s = self.state.lock();
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
            self.status.send_modify(|s| s.slow_path_renews += 1);
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

    /// Records our own successful write; our clock for it starts at `sent`, before the request.
    pub(super) fn observe(&self, rec: LeaderRecord, version: String, sent: Instant) -> bool {
        self.note_result(None, "write");
        let mut s = self.state.lock();
        s.written = Some((version.clone(), Term::of(&rec)));
        s.record = rec;
        s.version = Some(version);
        s.time = sent;
        true
    }

    /// Whether the observed record names this candidate in the term of this elector's own last
    /// write (see [`Term`]).
    pub(super) fn holds_record(&self) -> bool {
        let s = self.state.lock();
        s.record.holder_identity == self.lock.identity()
            && s.written.as_ref().is_some_and(|(version, term)| {
                s.version.as_ref() == Some(version) || *term == Term::of(&s.record)
            })
    }

    fn is_lease_valid(&self, now: Instant) -> bool {
        let s = self.state.lock();
        s.time + Duration::from_secs(u64::from(s.record.lease_duration_seconds)) > now
    }
}
