//! The metrics task: refreshes the unfinished-work gauges on the crate's
//! [`BackgroundTask`](crate::task::BackgroundTask) helper, started by the first add.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tracing::debug;

use super::machine::QueueKey;
use super::state::Shared;
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;

impl<K: QueueKey + 'static> Shared<K> {
    /// Starts the gauge refresh loop on the queue's runtime (binding the queue to the calling
    /// one if it has none yet), once. It does not start after shutdown.
    pub(super) fn start_metrics_task(self: &Arc<Self>) {
        if self.is_shutting_down() {
            return;
        }
        let mut task = self.metrics_task.lock();
        if task.started() {
            return;
        }
        let Some(runtime) = self.clock.runtime() else {
            return;
        };
        if !task.start(runtime, metrics_loop(Arc::downgrade(self)), || {}) {
            debug!(queue = %self.name, "the queue's runtime has shut down: no metrics task");
        }
        self.metrics_started.store(true, Ordering::Release);
    }

    /// Sets the unfinished-work gauges from the items in progress.
    fn update_unfinished_work(&self) {
        let now = self.clock.now();
        let state = self.lock();
        let (total, longest) = state.recorder.unfinished_work(now);
        state.recorder.set_unfinished_work(total, longest);
    }
}

/// Refreshes the unfinished-work gauges every period until the queue is gone (or the task is
/// stopped).
async fn metrics_loop<K: QueueKey + 'static>(shared: Weak<Shared<K>>) {
    let mut tick = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.update_unfinished_work();
    }
}
