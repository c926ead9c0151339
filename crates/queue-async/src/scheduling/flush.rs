//! The timed moves: backoff expiry and the unschedulable leftover, as plain `flush_*` steps
//! tests can call, and the background loop that runs them at the next deadline.

use std::hash::Hash;
use std::sync::{Arc, Weak};

use ctrlq_queue_core::Compare;
use futures::future::{self, Either};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{Instrument, debug, trace};

use ctrlq_queue_core::scheduling::{ClusterEvent, EventPayload};

use super::QueuedItem;
use super::state::{LockedScheduling, lock};

impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    pub(crate) fn flush_backoff_completed(&self, now: Instant) -> usize {
        let count = self
            .rules
            .flush_backoff_completed(&mut lock(&self.hot), now);
        if count > 0 {
            trace!(count, "backoff completed");
            self.pop_wake.notify_waiters();
        }
        count
    }

    /// The flush loop's next wake-up: the earlier of the backoff head's expiry and the next
    /// leftover deadline; `None` when neither exists (then it waits for `timer_wake` only).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let leftover = lock(&self.main).next_leftover();
        let backoff = lock(&self.hot).next_expiry();
        match (leftover, backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    /// Starts the flush loop unless it runs already (or the queue is closed): on the current
    /// runtime, or from a plain thread on the queue's (see [`QueueClock`]). With no live
    /// runtime it does nothing: the items wait, and the next call from inside one (an
    /// insertion, a move or a `pop` that has to wait) starts the loop. A loop whose runtime
    /// shut down is replaced the same way, and the new one takes over every waiting item (it
    /// reads the backoff head and scans unschedulable like any loop).
    pub(crate) fn ensure_flush_task(&self) {
        let mut task = lock(&self.flush_task);
        if task.running().is_some() || lock(&self.hot).is_closed() {
            return;
        }
        let Some(runtime) = self.clock.runtime() else {
            trace!("no tokio runtime here: the flush loop starts at the next call inside one");
            return;
        };
        let restart = task.has_ended();
        let span = tracing::debug_span!("scheduling_queue_flush");
        let flush = flush_loop(self.me.clone(), self.timer_wake.clone()).instrument(span);
        if !task.start(&runtime, flush) {
            // A runtime that has shut down drops the loop at once.
            trace!(
                "the queue's runtime has shut down: the flush loop starts at the next call inside one"
            );
            return;
        }
        if restart {
            debug!("flush loop restarted: the runtime of the previous one shut down");
        }
        self.clock.set_runtime(&runtime);
    }

    pub(crate) fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        let mut main = lock(&self.main);
        if !self.rules.any_leftover_due(&main, now) {
            // Nothing due: the deadline was early (its item left); set the next one.
            self.rules.refresh_next_leftover(&mut main);
            return 0;
        }
        let event = ClusterEvent::UNSCHEDULABLE_TIMEOUT;
        self.move_with(
            &mut main,
            &event,
            &EventPayload::none(),
            now,
            |main, sink| self.rules.move_leftover(main, now, sink),
        )
    }

    /// What the flush loop does at a deadline: the backoff items whose backoff ended, then,
    /// if a leftover deadline has passed, the leftover flush.
    fn flush_due(&self, now: Instant) {
        self.flush_backoff_completed(now);
        if lock(&self.main)
            .next_leftover()
            .is_some_and(|next| next <= now)
        {
            self.flush_unschedulable_leftover(now);
        }
    }
}

/// The background loop: a `select` shell around the flushes. It holds only a `Weak` to the
/// state, and ends on `shut_down` or when the last handle drops (see [`BackgroundTask`]). It
/// starts lazily (see [`LockedScheduling::ensure_flush_task`]), so a queue can be built outside a
/// runtime and outlive the runtime of its first loop.
///
/// One timer: a sleep until the earliest deadline (see [`LockedScheduling::next_deadline`]), re-armed
/// through `timer` when a deadline gets earlier; with no deadline, no timer at all, so under
/// paused time the clock jumps straight to the next deadline.
async fn flush_loop<K, T, C>(weak: Weak<LockedScheduling<K, T, C>>, timer: Arc<Notify>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    while let Some(next) = weak.upgrade().map(|s| s.next_deadline()) {
        let Some(deadline) = next else {
            timer.notified().await;
            continue;
        };
        let notified = std::pin::pin!(timer.notified());
        let sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
        // `select` polls the wake-up first: a deadline that got earlier re-arms the sleep.
        if let Either::Right(((), _)) = future::select(notified, sleep).await
            && let Some(s) = weak.upgrade()
        {
            s.flush_due(Instant::now());
        }
    }
    debug!("flush loop ended");
}
