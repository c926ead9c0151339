//! The metrics task: refreshes the unfinished-work gauges on the crate's
//! [`BackgroundTask`](crate::task::BackgroundTask) helper, started by the first add.

use std::sync::{Arc, Weak};

use tracing::debug;

use super::machine::{Payload, QueueKey};
use super::state::{Shared, State};
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
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
