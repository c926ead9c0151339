//! The timed moves: backoff expiry and the unschedulable leftover, as plain `flush_*` steps
//! tests can call. The timer task that makes them at their deadlines is in `timer`.

use std::hash::Hash;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;
use tracing::trace;

use super::machine::{ClusterEvent, EventPayload};

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

    /// The timer task's next deadline: the earlier of the backoff head's expiry and the next
    /// leftover deadline; `None` when neither exists (then the task waits for a poke only).
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

    pub(super) fn flush_due(&self, now: Instant) {
        self.flush_backoff_completed(now);
        if lock(&self.main)
            .next_leftover()
            .is_some_and(|next| next <= now)
        {
            self.flush_unschedulable_leftover(now);
        }
    }

    /// The moves a queue makes with no timer left (its runtime shut down), when the runtime
    /// goes and then at each `pop` that would wait: every item in backoff goes to active now,
    /// and the unschedulable items past their leftover deadline move; the others wait for an
    /// event, or for the next `pop` that looks.
    pub(super) fn flush_without_timer(&self) {
        let now = self.clock.now();
        let moved = self.rules.flush_backoff_all(&mut lock(&self.hot), now);
        if moved > 0 {
            trace!(moved, "backoff ended: no timer left");
            self.pop_wake.notify_waiters();
        }
        self.flush_due(now);
    }
}
