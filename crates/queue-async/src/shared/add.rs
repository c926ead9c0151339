//! Adds now: the handle's `add`, `add_ref` and `add_all`, and the locked steps every add
//! ends in (also the delayed adds, in `delay`): end the key's wait if it has one, then hand
//! the key to the state machine, and count it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ctrlq_queue_core::AddOutcome;

use super::machine::{AddKey, Machine, Payload, QueueKey};
use super::state::{Shared, State, Wake};
use crate::error::AddError;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Adds `key` now; a borrowed key (`&K`) is cloned only if the queue keeps it.
    #[inline(always)]
    pub(crate) fn add(self: &Arc<Self>, key: impl AddKey<K>, p: P) -> Result<(), AddError<K>> {
        let mut wake = Wake::default();
        let mut state = self.lock();
        let r = self.add_locked(&mut state, key, p, &mut wake);
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
        let mut wake = Wake::default();
        let mut state = self.lock();
        if state.machine.is_shut_down() {
            return Err(AddError::ShutDown(keys));
        }
        for key in keys {
            // The state is open under this hold of the lock: every add succeeds.
            let _ = self.add_locked(&mut state, key, p, &mut wake);
        }
        drop(state);
        self.keep_metrics_task();
        self.wake(wake);
        Ok(())
    }

    /// Adds `key` now, under the lock; a wait of the key ends (its payload is kept if
    /// higher).
    #[inline(always)]
    pub(super) fn add_locked(
        &self,
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
        self.add_now_locked(state, key, p, wake)
    }

    /// Adds `key` now, under the lock, when it does not wait (the delay task's adds).
    #[inline(always)]
    pub(super) fn add_now_locked(
        &self,
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
        match added {
            AddOutcome::Queued => {
                if let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                self.queued(wake);
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
        }
    }

    /// A key was queued (an add, or a done that requeues it): one getter is woken.
    #[inline(always)]
    pub(super) fn queued(&self, wake: &mut Wake) {
        wake.getters += 1;
    }
}
