//! Keeping the lease while leading (renewing every retry period within the renew deadline),
//! and giving it up on a stop when asked to.

use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tracing::debug;

use super::LeaderElector;
use crate::{Leadership, LeadershipEnd, Lock, LockError};

impl<L: Lock> LeaderElector<L> {
    /// How long a grant holds after the acquire or renew that made it was sent: retry period +
    /// renew deadline ([`crate::Leadership::valid_until`]).
    pub(super) fn valid_for(&self) -> Duration {
        self.config.retry_period + self.config.renew_deadline
    }

    /// Renews until a renew cannot succeed before `last_sent + retry period + renew deadline`
    /// or a renew sees another holder; returns why it stopped. Each renew is sent a retry period
    /// after the previous successful one was sent (at once if its answer came later), and moves
    /// the leadership's [`valid_until`](crate::Leadership::valid_until) on.
    pub(super) async fn renew(
        &self,
        mut last_sent: Instant,
        leadership: &Leadership,
    ) -> LeadershipEnd {
        let rp = self.config.retry_period;
        loop {
            let deadline = last_sent + self.valid_for();
            sleep_until(last_sent + rp).await;
            loop {
                let sent = Instant::now();
                let ok = timeout_at(deadline, self.try_acquire_or_renew(true)).await;
                self.reports.leader(&self.observed_record().holder_identity);
                match ok {
                    Ok(Some(_)) => {
                        last_sent = sent;
                        leadership.extend(sent + self.valid_for());
                        break;
                    }
                    Err(_) => {
                        debug!("renew deadline passed");
                        return LeadershipEnd::RenewDeadlinePassed;
                    }
                    Ok(None) if !self.holds_record() => {
                        debug!(holder = %self.observed_record().holder_identity, "lost the lease");
                        return LeadershipEnd::LostToOther;
                    }
                    Ok(None) => {}
                }
                sleep_until((sent + rp).min(deadline)).await;
                if Instant::now() >= deadline {
                    debug!("renew deadline passed");
                    return LeadershipEnd::RenewDeadlinePassed;
                }
            }
        }
    }

    /// Blanks the record if it still names this candidate, within a renew deadline.
    pub(super) async fn release(&self) {
        let attempt = async {
            loop {
                let old = match self.lock.get().await {
                    Ok(old) => old,
                    Err(e) => return debug!(error = %e, "release: get failed"),
                };
                if old.record.holder_identity != self.lock.identity() {
                    return debug!("release: not the holder any more");
                }
                let rec = old.record.released();
                match self.lock.update(rec.clone()).await {
                    Ok(v) => {
                        debug!("released");
                        self.reports.store_answers();
                        self.observe_write(rec, v, Instant::now());
                        return self.reports.leader(&self.observed_record().holder_identity);
                    }
                    Err(LockError::Conflict) => {}
                    Err(e) => return debug!(error = %e, "release: update failed"),
                }
            }
        };
        if timeout(self.config.renew_deadline, attempt).await.is_err() {
            debug!("release timed out");
        }
    }
}
