//! Adds now: the handle's `add`, `add_ref` and `add_all`, and the locked steps every add
//! ends in (also the delayed adds, in `delay`): end the key's wait if it has one, then hand
//! the key to the state machine and count it.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::runtime::Handle;

use super::machine::{Added, Machine, Payload, QueueKey};
use super::state::{Shared, State, Wake};
use crate::error::ShutDownError;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Adds `key` now; a borrowed key is cloned only if the queue keeps it.
    ///
    /// Written out rather than passed to `with_lock` as a closure, and inlined down to the state
    /// machine (`#[inline(always)]` on each step: the compiler's heuristics leave this chain
    /// out of line), so that in each handle method the key's form (borrowed or owned) is known
    /// where the machine is called and the match on it folds away.
    #[inline(always)]
    pub(crate) fn add(self: &Arc<Self>, key: Cow<'_, K>, p: P) -> Result<(), ShutDownError<K>> {
        let mut wake = Wake::default();
        let mut state = self.lock();
        let r = self.add_locked(&mut state, key, p, &mut wake);
        self.keep_metrics_task(&mut state);
        let streams = state.streams_waiting > 0;
        drop(state);
        self.wake(wake, streams);
        r
    }

    /// Starts the gauge refresh loop at an add if the queue has metrics and the loop does not
    /// run (it ends with its runtime, and restarts in the next one that adds).
    #[inline]
    pub(super) fn keep_metrics_task(self: &Arc<Self>, state: &mut State<K, P>) {
        if state.recorder.is_enabled() && state.metrics_task.running().is_none() {
            self.start_metrics_task(state);
        }
    }

    /// Adds `keys` now, in order, under one hold of the lock (see `WorkQueue::add_all`).
    pub(crate) fn add_all(
        self: &Arc<Self>,
        keys: Vec<K>,
        p: P,
    ) -> Result<(), ShutDownError<Vec<K>>> {
        self.with_lock(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(ShutDownError(keys));
            }
            let mut refused = Vec::new();
            for key in keys {
                if let Err(ShutDownError(key)) = self.add_locked(state, Cow::Owned(key), p, wake) {
                    refused.push(key);
                }
            }
            self.keep_metrics_task(state);
            if refused.is_empty() {
                Ok(())
            } else {
                Err(ShutDownError(refused))
            }
        })
    }

    /// Adds `key` now, under the lock; a wait of the key ends (its payload is kept if higher).
    #[inline(always)]
    pub(super) fn add_locked(
        &self,
        state: &mut State<K, P>,
        key: Cow<'_, K>,
        mut p: P,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            let mut timers = self.lock_timers();
            // With the delay task gone, its timers are stale (they are set again when it
            // restarts): only the wait is ended.
            let runtime = timers.delay_task.running().cloned();
            let _runtime = runtime.as_ref().map(Handle::enter);
            if let Some(waiting) = timers.timers.cancel(&key, runtime.is_some()) {
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
        key: Cow<'_, K>,
        p: P,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        // The recorder needs the key after the machine took it: clone only when metrics are on.
        let metric_key = state.recorder.is_enabled().then(|| (*key).clone());
        let now = self.now_nanos();
        let added = match key {
            Cow::Owned(key) => state.machine.add(key, p, now),
            Cow::Borrowed(key) => state.machine.add_ref(key, p, now),
        };
        let priority = <P::Machine<K> as Machine<K>>::metric_priority(p);
        match added {
            Added::Queued => {
                if let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                wake.getters += 1;
                Ok(())
            }
            Added::Raised { from } => {
                if let Some(to) = priority {
                    state.recorder.reprioritize(from, to);
                }
                Ok(())
            }
            Added::Deferred { newly_dirty } => {
                // Dirty while processing: counted by depth and adds, as the original.
                if newly_dirty && let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                Ok(())
            }
            Added::Coalesced => Ok(()),
            Added::Refused(key) => Err(ShutDownError(key)),
        }
    }
}
