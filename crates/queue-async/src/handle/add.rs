//! Adds: now (`add`, `add_ref`, `add_all`) and later (`add_after`, `add_rate_limited`). Every
//! add ends in one locked step: end the key's wait if it has one, hand the key to the state
//! machine, count it, and ask for a wake-up if it was queued. A delayed add sets the key's
//! deadline instead, and the timer task (in `timer_task`) adds it once the deadline passes.

use std::time::Duration;

use ctrlq_queue_core::AddOutcome;
use tracing::debug;

use super::{Core, Handle, QueueKey, State, Wake};
use crate::clock::MAX_DELAY;
use crate::error::AddError;

impl<K: QueueKey + 'static, M: Core<K>> Handle<K, M> {
    /// Adds `key` now at `priority`.
    #[inline(always)]
    pub(crate) fn add(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        self.add_now(|state, wake| self.add_locked(state, key, priority, wake))
    }

    /// Adds `key` now at `priority`, cloning it only if the queue keeps it.
    #[inline(always)]
    pub(crate) fn add_ref(&self, key: &K, priority: i32) -> Result<(), AddError<K>> {
        self.add_now(|state, wake| {
            let priority = self.end_wait(state, key, priority);
            let added = state.machine.add_ref(key, priority, self.now_nanos());
            self.added(state, added, Some(key), priority, wake)
        })
    }

    /// Adds `keys` now, in order, at priority 0 (see `WorkQueue::add_all`).
    pub(crate) fn add_all(&self, keys: Vec<K>) -> Result<(), AddError<Vec<K>>> {
        self.add_now(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(AddError::ShutDown(keys));
            }
            for key in keys {
                // The state is open under this hold of the lock: every add succeeds.
                let _ = self.add_locked(state, key, 0, wake);
            }
            Ok(())
        })
    }

    /// Runs an add under the lock, then wakes. With metrics, the timer task, which refreshes
    /// the gauges, starts at the first add.
    #[inline(always)]
    fn add_now<R>(&self, add: impl FnOnce(&mut State<K, M>, &mut Wake) -> R) -> R {
        self.with_lock(|state, wake| {
            let r = add(state, wake);
            if state.recorder.is_enabled() {
                self.ensure_timer_task(state);
            }
            r
        })
    }

    /// Adds `key` now, under the lock; a wait of the key ends (its priority is kept if
    /// higher).
    #[inline(always)]
    fn add_locked(
        &self,
        state: &mut State<K, M>,
        key: K,
        priority: i32,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        let priority = self.end_wait(state, &key, priority);
        self.add_unwaited(state, key, priority, wake)
    }

    /// Adds `key` now, under the lock, when it does not wait (the timer task's adds).
    #[inline(always)]
    pub(super) fn add_unwaited(
        &self,
        state: &mut State<K, M>,
        key: K,
        priority: i32,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        // The recorder needs the key after the machine took it: cloned only with metrics.
        let metric_key = state.recorder.is_enabled().then(|| key.clone());
        let added = state.machine.add(key, priority, self.now_nanos());
        self.added(state, added, metric_key.as_ref(), priority, wake)
    }

    /// Ends `key`'s wait if it has one; returns the higher of the two priorities.
    #[inline(always)]
    fn end_wait(&self, state: &mut State<K, M>, key: &K, priority: i32) -> i32 {
        if state.timers.len() == 0 {
            // Every add now asks: no key is hashed while none waits.
            return priority;
        }
        state
            .timers
            .cancel(key)
            .map_or(priority, |waited| priority.max(waited))
    }

    /// Counts what the machine did with an add (`key`: for the metrics, `None` without) and
    /// asks for a getter's wake-up if it queued the key.
    #[inline(always)]
    fn added(
        &self,
        state: &mut State<K, M>,
        added: AddOutcome<K>,
        key: Option<&K>,
        priority: i32,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        let newly_dirty = match added {
            AddOutcome::Queued => {
                wake.getters += 1;
                true
            }
            // Dirty while processing: counted by depth and adds, as the original.
            AddOutcome::Deferred { newly_dirty } => newly_dirty,
            AddOutcome::Raised { from } => {
                state.recorder.reprioritize(from, priority);
                false
            }
            AddOutcome::Coalesced => false,
            AddOutcome::ShutDown(key) => return Err(AddError::ShutDown(key)),
        };
        if newly_dirty
            && let Some(key) = key
            && state.recorder.is_enabled()
        {
            let label = M::HAS_PRIORITY.then_some(priority);
            state.recorder.add_at_priority(key, label, &self.clock);
        }
        Ok(())
    }

    /// Adds `key` at `priority` once `delay` has passed (see `WorkQueue::add_after`).
    pub(crate) fn add_after(
        &self,
        key: K,
        priority: i32,
        delay: Duration,
    ) -> Result<(), AddError<K>> {
        self.add_now(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(AddError::ShutDown(key));
            }
            if !delay.is_zero() || M::ZERO_DELAY_IS_RETRY {
                state.recorder.retry();
            }
            if delay.is_zero() || state.machine.absorbs_delayed(&key) {
                return self.add_locked(state, key, priority, wake);
            }
            self.wait(state, key, priority, delay.min(MAX_DELAY), wake)
        })
    }

    /// Adds `key` at `priority` after the rate limiter's delay for it.
    pub(crate) fn add_rate_limited(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        if self.is_shutting_down() {
            return Err(AddError::ShutDown(key));
        }
        let delay = self.rate_limit_delay(&key);
        self.add_after(key, priority, delay)
    }

    /// Charges the rate limiter for `key` and returns its delay. The limiter reads tokio's
    /// clock: from a plain thread, the queue's runtime clock.
    pub(crate) fn rate_limit_delay(&self, key: &K) -> Duration {
        self.clock.in_runtime(|| self.limiter.when(key))
    }

    /// Makes `key` wait `delay`, starting the timer task if it does not run. With no runtime
    /// to time the wait (none bound yet and none here, or the queue's runtime shut down), the
    /// key is added now rather than lost.
    fn wait(
        &self,
        state: &mut State<K, M>,
        key: K,
        priority: i32,
        delay: Duration,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        match self.ensure_timer_task(state) {
            Some(runtime) => {
                // The deadline is read by the queue's runtime's clock (paused, in tests),
                // whatever thread this add comes from.
                let _runtime = runtime.enter();
                let at = tokio::time::Instant::now() + delay;
                state.timers.wait_until(key, priority, at);
                Ok(())
            }
            None => {
                debug!(queue = %self.name, "delayed add with no live tokio runtime; adding now");
                self.add_unwaited(state, key, priority, wake)
            }
        }
    }
}
