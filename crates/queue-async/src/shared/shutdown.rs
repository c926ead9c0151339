//! Shutdown: adds refused, waiting keys dropped, tasks stopped, waiters woken; and the wait
//! of `shut_down_with_drain`.

use std::sync::atomic::Ordering;

use tracing::debug;

use super::machine::{Machine, Payload, QueueKey};
use super::state::Shared;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Shuts down: adds refused, waiting keys and their timers dropped, background tasks
    /// stopped, every waiting `get` and stream woken. With `drain`, a drain starts.
    pub(crate) fn shut_down(&self, drain: bool) {
        self.draining.store(drain, Ordering::SeqCst);
        let first = self.lock().machine.shut_down();
        self.shutting_down.store(true, Ordering::Release);
        // Waiting keys are never added now: drop them, their timers and the tasks.
        {
            let mut timers = self.lock_timers();
            timers.shut_down = true;
            timers.timers.clear();
            timers.delay_task.stop();
            self.count_waiting(&timers);
        }
        self.metrics_task.lock().0.stop();
        if first {
            debug!(queue = %self.name, drain, "shutting down");
        }
        self.get_wake.notify_waiters();
        self.stream_wake.notify_waiters();
        if !drain {
            // A forced shutdown cuts a drain short.
            self.idle_wake.notify_waiters();
        }
    }

    /// Waits until a drain is over: idle, or cut short by a forced shutdown.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let idle = self.idle_wake.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.draining.load(Ordering::SeqCst) || self.lock().machine.is_idle() {
                return;
            }
            idle.await;
        }
    }
}
