//! Delayed adds: `add_after` and `add_rate_limited` set a key's timer under the timers' lock
//! ([`Timers`](super::timers::Timers)); the delay task, started by the first of them, takes the keys whose timer rang
//! and adds them in deadline order (through `add_now_locked`, in `add`).

use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::machine::{Machine, Payload, QueueKey};
use super::state::{Shared, TimerState, Wake};
use crate::clock::MAX_DELAY;
use crate::error::AddError;
use crate::task::{Timed, start_timer_task};

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Adds `key` once `delay` has passed (see `WorkQueue::add_after`).
    pub(crate) fn add_after(
        self: &Arc<Self>,
        key: K,
        p: P,
        delay: Duration,
    ) -> Result<(), AddError<K>> {
        let key = self.with_lock(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(Some(AddError::ShutDown(key)));
            }
            if !delay.is_zero() || <P::Machine<K> as Machine<K>>::ZERO_DELAY_IS_RETRY {
                state.recorder.retry();
            }
            if delay.is_zero() || state.machine.absorbs_delayed(&key) {
                return match self.add_locked(state, key, p, wake) {
                    Ok(()) => Err(None),
                    Err(e) => Err(Some(e)),
                };
            }
            Ok(key)
        });
        self.keep_metrics_task();
        match key {
            Ok(key) => self.wait(key, p, delay.min(MAX_DELAY)),
            Err(None) => Ok(()),
            Err(Some(e)) => Err(e),
        }
    }

    /// Adds `key` after the rate limiter's delay for it.
    pub(crate) fn add_rate_limited(self: &Arc<Self>, key: K, p: P) -> Result<(), AddError<K>> {
        if self.is_shutting_down() {
            return Err(AddError::ShutDown(key));
        }
        let delay = self.rate_limit_delay(&key);
        self.add_after(key, p, delay)
    }

    /// Charges the rate limiter for `key` and returns its delay. The limiter reads tokio's
    /// clock: from a plain thread, the queue's runtime clock.
    pub(crate) fn rate_limit_delay(&self, key: &K) -> Duration {
        self.clock.in_runtime(|| self.limiter.when(key))
    }

    /// Makes `key` wait `delay`, starting the delay task if it does not run. With no runtime
    /// to time the wait (none bound yet and none here, or the queue's runtime shut down), the
    /// key is added now rather than lost. Takes the timers' lock only.
    fn wait(self: &Arc<Self>, key: K, p: P, delay: Duration) -> Result<(), AddError<K>> {
        let key = {
            let mut timers = self.lock_timers();
            if timers.shut_down {
                return Err(AddError::ShutDown(key));
            }
            if !timers.runtime_gone && !timers.delay_task.running() {
                self.start_delay_task(&mut timers);
            }
            match self.clock.runtime() {
                Some(runtime) if timers.delay_task.running() && !timers.runtime_gone => {
                    // The timer's `Sleep` binds to the runtime in context, and the deadline is
                    // read by its clock (paused, in tests), whatever thread this add comes from.
                    let _runtime = runtime.enter();
                    timers.timers.wait_until(key, p, Instant::now() + delay);
                    self.count_waiting(&timers);
                    return Ok(());
                }
                _ => {
                    debug!(queue = %self.name, "delayed add with no live tokio runtime; adding now");
                    key
                }
            }
        };
        self.with_lock(|state, wake| self.add_now_locked(state, key, p, wake))
    }

    /// Starts the delay task on the queue's runtime (binding the queue to the calling one if
    /// it has none yet). Marks the runtime gone if it is shutting down.
    fn start_delay_task(self: &Arc<Self>, timers: &mut TimerState<K, P>) {
        let Some(runtime) = self.clock.runtime() else {
            return;
        };
        {
            let _runtime = runtime.enter();
            timers.timers.start_here();
        }
        if !start_timer_task(&mut timers.delay_task, runtime, Arc::downgrade(self)) {
            debug!(queue = %self.name, "the queue's runtime has shut down: delays end at once");
            timers.runtime_gone = true;
        }
    }

    /// Takes every waiting key whose timer rang under the timers' lock, then adds them in
    /// deadline order; `cx` is woken at the next timer.
    fn poll_due(&self, cx: &mut Context<'_>) {
        let due = {
            let mut timers = self.lock_timers();
            let due = timers.timers.poll_due(cx);
            self.count_waiting(&timers);
            due
        };
        self.add_due(due);
    }

    /// Adds keys whose wait is over, in the given order, under one hold of the lock.
    fn add_due(&self, due: Vec<(K, P)>) {
        if due.is_empty() {
            return;
        }
        let n = due.len();
        let mut wake = Wake::default();
        let mut state = self.lock();
        for (key, p) in due {
            // Refused only after a shutdown that came after the keys were taken (waiting keys
            // are dropped at shutdown).
            let _ = self.add_now_locked(&mut state, key, p, &mut wake);
        }
        drop(state);
        self.wake(wake);
        debug!(queue = %self.name, due = n, "delays over");
    }

    /// Adds every waiting key whose deadline is at or before now (test helper).
    #[cfg(feature = "test-util")]
    pub(crate) fn settle(&self) {
        let due = {
            let mut timers = self.lock_timers();
            let Some(runtime) = self.clock.runtime().filter(|_| timers.delay_task.running()) else {
                return;
            };
            let _runtime = runtime.enter();
            let due = timers.timers.take_due(Instant::now());
            self.count_waiting(&timers);
            due
        };
        self.add_due(due);
    }
}

/// The delay task ([`start_timer_task`]): adds each waiting key at its deadline.
impl<K: QueueKey + 'static, P: Payload> Timed for Shared<K, P> {
    fn poll_timers(&self, cx: &mut Context<'_>) {
        self.poll_due(cx);
    }

    /// The queue's runtime shut down: every waiting key is added now, in deadline order,
    /// rather than left with timers that will never ring; later delayed adds are added at once.
    fn timers_gone(&self) {
        let due = {
            let mut timers = self.lock_timers();
            timers.runtime_gone = true;
            let due = timers.timers.take_all();
            self.count_waiting(&timers);
            due
        };
        if !due.is_empty() {
            debug!(queue = %self.name, waiting = due.len(), "the queue's runtime shut down: waits end now");
        }
        self.add_due(due);
    }
}
