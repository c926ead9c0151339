//! The queue's background tasks on the crate's [`BackgroundTask`] helper: the delay task,
//! which adds each waiting key at its deadline, and the metrics ticker.
//!
//! [`BackgroundTask`]: crate::task::BackgroundTask

use std::borrow::Cow;
use std::future::poll_fn;
use std::sync::{Arc, Weak};
use std::task::Poll;

use tracing::{Instrument, debug, debug_span};

use super::{Payload, QueueKey, Shared, State, TimerState};
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Starts the delay task on the calling runtime, else on the queue's; moves every waiting
    /// key's timer there. `false` if no runtime is alive.
    pub(super) fn start_delay_task(self: &Arc<Self>, state: &mut TimerState<K, P>) -> bool {
        let Some(runtime) = self.clock.runtime() else {
            return false;
        };
        if state.delay_task.has_ended() {
            debug!(queue = %self.name, waiting = state.timers.len(), "delay task restarted");
        }
        if !state.delay_task.start(
            &runtime,
            delay_loop(Arc::downgrade(self), self.name.clone()),
        ) {
            return false;
        }
        self.clock.set_runtime(&runtime);
        let _runtime = runtime.enter();
        state.timers.rearm();
        true
    }

    /// Takes every waiting key whose timer rang under the timers' lock, then adds them in
    /// deadline order under one hold of the queue's lock; `cx` is woken at the next timer.
    fn poll_timers(&self, cx: &mut std::task::Context<'_>) {
        let due = {
            let mut timers = self.lock_timers();
            let due = timers.timers.poll_due(cx);
            self.count_waiting(&timers);
            due
        };
        self.add_due(due);
    }

    /// Adds keys whose wait is over, in the given order, under one hold of the lock.
    pub(super) fn add_due(&self, due: Vec<(K, P)>) {
        if due.is_empty() {
            return;
        }
        let n = due.len();
        self.with_lock(|state, wake| {
            for (key, p) in due {
                // Refused only after a shutdown that came after the keys were taken: waiting
                // keys are dropped at shutdown.
                let _ = self.add_now_locked(state, Cow::Owned(key), p, wake);
            }
        });
        debug!(queue = %self.name, due = n, "delays over");
    }

    // ----- metrics -----

    /// Starts the gauge refresh loop on the calling runtime (none outside one, or after
    /// shutdown).
    pub(super) fn start_metrics_task(self: &Arc<Self>, state: &mut State<K, P>) {
        if self.is_shutting_down() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if state.metrics_task.has_ended() {
            debug!(queue = %self.name, "metrics task restarted");
        }
        if state
            .metrics_task
            .start(&runtime, metrics_loop(Arc::downgrade(self)))
        {
            self.clock.set_runtime(&runtime);
        }
    }
}

/// The delay task: adds each waiting key at its deadline, until the queue is gone (or the
/// task is stopped, see [`BackgroundTask`]).
async fn delay_loop<K: QueueKey + 'static, P: Payload>(shared: Weak<Shared<K, P>>, name: String) {
    debug!(queue = %name, "delay task started");
    // Unconstrained: the keys due at one instant come out in one batch, in order, rather than
    // cut where tokio's cooperative budget runs out.
    tokio::task::unconstrained(poll_fn(|cx| match shared.upgrade() {
        Some(shared) => {
            shared.poll_timers(cx);
            Poll::Pending
        }
        None => Poll::Ready(()),
    }))
    .instrument(debug_span!("workqueue_delay", queue = %name))
    .await;
}

/// Refreshes the unfinished-work gauges every period until the queue is gone (or the task is
/// stopped).
async fn metrics_loop<K: QueueKey + 'static, P: Payload>(shared: Weak<Shared<K, P>>) {
    let mut tick = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.lock().recorder.update_unfinished_work(&shared.clock);
    }
}
