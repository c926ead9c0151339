//! Adds now: the handle's `add`, `add_ref` and `add_all`, and the locked steps every add
//! ends in (also the delayed adds, in `delay`): end the key's wait if it has one, then hand
//! the key to its shard's state machine, put the shard in the hand-out order, and count it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ctrlq_queue_core::AddOutcome;

use super::machine::{AddKey, Machine, Payload, QueueKey};
use super::state::{Shared, State, Wake};
use crate::error::{AddError, Refused};

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Adds `key` now; a borrowed key (`&K`) is cloned only if the queue keeps it.
    #[inline(always)]
    pub(crate) fn add(self: &Arc<Self>, key: impl AddKey<K>, p: P) -> Result<(), AddError<K>> {
        let shard = self.shard_of(key.key());
        let mut wake = Wake::default();
        let mut state = self.lock(shard);
        let r = self.add_locked(shard, &mut state, key, p, &mut wake);
        drop(state);
        self.keep_metrics_task();
        self.wake(wake);
        r
    }

    /// Starts the gauge refresh loop at an add if the queue has metrics and the loop does not
    /// run (it ends with its runtime, and restarts in the next one that adds).
    #[inline]
    pub(super) fn keep_metrics_task(self: &Arc<Self>) {
        if self.metrics && self.metrics_live.load(Ordering::Acquire) == 0 {
            self.start_metrics_task();
        }
    }

    /// Adds `keys` now, in order (see `WorkQueue::add_all`).
    pub(crate) fn add_all(self: &Arc<Self>, keys: Vec<K>, p: P) -> Result<(), AddError<Vec<K>>> {
        if self.is_shutting_down() {
            return Err(AddError::ShutDown(keys));
        }
        let mut refused = Refused::default();
        let mut wake = Wake::default();
        if self.shards.len() == 1 {
            let mut state = self.lock(0);
            for key in keys {
                refused.note(self.add_locked(0, &mut state, key, p, &mut wake));
            }
        } else {
            for key in keys {
                let shard = self.shard_of(&key);
                let mut state = self.lock(shard);
                refused.note(self.add_locked(shard, &mut state, key, p, &mut wake));
            }
        }
        self.keep_metrics_task();
        self.wake(wake);
        refused.into_result()
    }

    /// Adds `key` now, under its shard's lock; a wait of the key ends (its payload is kept if
    /// higher).
    #[inline(always)]
    pub(super) fn add_locked(
        &self,
        shard: usize,
        state: &mut State<K, P>,
        key: impl AddKey<K>,
        mut p: P,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            let mut timers = self.lock_timers();
            // A key waits only while the delay task runs on the queue's runtime: removing its
            // timer happens there.
            let _runtime = self.clock.runtime().map(|runtime| runtime.enter());
            if let Some(waiting) = timers.timers.cancel(key.key()) {
                p = p.max(waiting);
                self.count_waiting(&timers);
            }
        }
        self.add_now_locked(shard, state, key, p, wake)
    }

    /// Adds `key` now, under its shard's lock, when it does not wait (the delay task's adds).
    #[inline(always)]
    pub(super) fn add_now_locked(
        &self,
        shard: usize,
        state: &mut State<K, P>,
        key: impl AddKey<K>,
        p: P,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        // The recorder needs the key after the machine took it: clone only when metrics are on.
        let metric_key = state.recorder.is_enabled().then(|| key.key().clone());
        let now = self.now_nanos();
        let added = key.add_to(&mut state.machine, p, now);
        let priority = <P::Machine<K> as Machine<K>>::metric_priority(p);
        // One match over the outcome, refusals included: the add path is the queue's hottest.
        match added {
            AddOutcome::Queued => {
                if let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                self.queued(shard, state, wake);
                Ok(())
            }
            AddOutcome::Raised { from } => {
                if let Some(to) = priority {
                    state.recorder.reprioritize(from, to);
                }
                Ok(())
            }
            AddOutcome::Deferred { newly_dirty } => {
                // Dirty while processing: counted by depth and adds, as the original.
                if newly_dirty && let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                Ok(())
            }
            AddOutcome::Coalesced => Ok(()),
            AddOutcome::ShutDown(key) => Err(AddError::ShutDown(key)),
            AddOutcome::Full(key) => Err(AddError::Full(key)),
        }
    }

    /// A key of `shard` was queued (an add, or a done that requeues it): it takes its place in
    /// the hand-out order, under the shard's lock (so a shutdown, which takes every shard's
    /// lock, comes after it), and one getter is woken.
    #[inline(always)]
    pub(super) fn queued(&self, shard: usize, state: &mut State<K, P>, wake: &mut Wake) {
        if self.shards.len() > 1 {
            // `shard` < `MAX_SHARDS`, which fits a u32.
            self.order.lock().push_back(shard as u32);
        }
        self.note_busy(state, wake);
        wake.getters += 1;
    }
}
