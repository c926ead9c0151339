//! A term: acquire, run the work while renewing (every retry period within the renew
//! deadline), stop (draining on a stop request), release when asked; and standing again after
//! each term until cancelled.

use std::pin::pin;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span};

use super::LeaderElector;
use crate::{Leadership, LeadershipEnd, Lock, LockError};

impl<L: Lock> LeaderElector<L> {
    /// Acquires the lease, runs `work` while leading, then stops. Returns `None` if `cancel`
    /// fired before the lease was acquired, else the work's output. Callable again after it
    /// returns, to stand for election again.
    ///
    /// - On a lost lease (a renew saw another holder, or no renew succeeded before the renew
    ///   deadline) the work's [`crate::Leadership::token`] fires at once and renewing stops.
    /// - When `cancel` fires while leading, the token fires at once (the work drains), and the
    ///   lease is renewed until the work returns, for at most the
    ///   [grace period](crate::LeaderElectionConfig::grace_period); then renewing stops.
    /// - When the work returns on its own, renewing stops.
    ///
    /// In every case the work is awaited to completion; then, if `cancel` fired and
    /// [`release_on_cancel`](crate::LeaderElectionConfig::release_on_cancel) is set, the lease is
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
            let (sent, granted) = self.acquire(&cancel).await?;
            let fencing = self.lock.fencing_token(&granted);
            let leadership = Leadership::new(fencing, sent + self.valid_for());
            self.reports.started(fencing);
            // A dropped run stops leading too, and says so.
            let mut leading = StopLeading {
                elector: self,
                leadership: &leadership,
                run_ended: false,
            };
            debug!(identity = self.lock.identity(), fencing, "started leading");
            let mut work = pin!(work(leadership.clone()));
            let mut renew = pin!(self.renew(sent, &leadership));
            let lost = |reason| {
                debug!(?reason, "leadership lost");
                leadership.end(reason);
                None
            };
            let out = tokio::select! {
                out = &mut work => {
                    leadership.end(LeadershipEnd::WorkFinished);
                    Some(out)
                }
                reason = &mut renew => lost(reason),
                () = cancel.cancelled() => {
                    debug!(grace = ?self.config.grace_period, "stop requested; draining");
                    leadership.end(LeadershipEnd::StopRequested);
                    tokio::select! {
                        out = &mut work => Some(out),
                        reason = &mut renew => lost(reason),
                        () = sleep(self.config.grace_period) => {
                            debug!("grace period over; no longer renewing");
                            None
                        }
                    }
                }
            };
            leading.run_ended = true;
            drop(leading);
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

    /// Stands for election until `cancel` fires: [`run`](Self::run) in a loop, `work` called
    /// once per term. Returns the number of terms led.
    ///
    /// After a lost lease it stands again at once (acquiring retries every retry period while
    /// another candidate holds the lease). After a term whose work returned on its own it waits
    /// one retry period first, so work that returns at once does not turn into a loop of
    /// acquisitions. Each term has its own [`Leadership`] and a larger fencing token.
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run): dropping the future drops the current term's work.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let elector = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let stop = CancellationToken::new();
    /// let (mut tokens, stopper) = (Vec::new(), stop.clone());
    /// let terms = elector
    ///     .run_until_cancelled(stop, |leadership| {
    ///         tokens.push(leadership.fencing_token());
    ///         if tokens.len() == 3 {
    ///             stopper.cancel();
    ///         }
    ///         async {} // the work returns: the next term comes a retry period later
    ///     })
    ///     .await;
    /// assert_eq!((terms, tokens), (3, vec![0, 1, 2]));
    /// # }
    /// ```
    pub async fn run_until_cancelled<F, Fut>(&self, cancel: CancellationToken, mut work: F) -> u64
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future,
    {
        let mut terms = 0;
        loop {
            let mut term = None;
            let led = self
                .run(cancel.clone(), |leadership: Leadership| {
                    term = Some(leadership.clone());
                    work(leadership)
                })
                .await;
            // A run returns `None` only when `cancel` fired before it acquired.
            terms += u64::from(led.is_some());
            if cancel.is_cancelled() {
                return terms;
            }
            if term.and_then(|l| l.end_reason()) == Some(LeadershipEnd::WorkFinished) {
                let retry = sleep(self.config.retry_period);
                if cancel.run_until_cancelled(retry).await.is_none() {
                    return terms;
                }
            }
        }
    }

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
                let renewed = timeout_at(deadline, self.try_acquire_or_renew(true)).await;
                self.reports.leader(&self.observed_record().holder_identity);
                match renewed {
                    Ok(Some(_)) => {
                        last_sent = sent;
                        leadership.extend(sent + self.valid_for());
                        break;
                    }
                    Ok(None) if !self.holds_record() => {
                        debug!(holder = %self.observed_record().holder_identity, "lost the lease");
                        return LeadershipEnd::LostToOther;
                    }
                    Ok(None) => sleep_until((sent + rp).min(deadline)).await,
                    // The deadline passed: the check below ends the term.
                    Err(_) => {}
                }
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

/// Ends a term's leading when dropped: the status and the lossless events. A `run` dropped
/// while leading stops renewing, so it must not go on saying it leads: dropped before the run
/// reached its end, it ends the leadership with [`LeadershipEnd::RunDropped`] first.
struct StopLeading<'a, L: Lock> {
    elector: &'a LeaderElector<L>,
    leadership: &'a Leadership,
    run_ended: bool,
}

impl<L: Lock> Drop for StopLeading<'_, L> {
    fn drop(&mut self) {
        if !self.run_ended {
            self.leadership.end(LeadershipEnd::RunDropped);
        }
        self.elector.reports.stopped(self.leadership);
    }
}
