//! The metrics task: refreshes the unfinished-work gauges on the crate's
//! [`BackgroundTask`](crate::task::BackgroundTask) helper, started by the first add.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tracing::debug;

use super::{Core, Handle, QueueKey};
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;

impl<K: QueueKey + 'static, M: Core<K>> Handle<K, M> {
    /// Starts the gauge refresh loop at an add if the queue has metrics and the loop does not
    /// run (it ends with its runtime, and restarts in the next one that adds).
    #[inline]
    pub(super) fn keep_metrics_task(&self) {
        if self.metrics && self.metrics_live.load(Ordering::Acquire) == 0 {
            self.start_metrics_task();
        }
    }

    /// Starts the gauge refresh loop on the queue's runtime (binding the queue to the calling
    /// one if it has none yet). It does not start after shutdown, nor again once the queue's
    /// runtime has shut down.
    fn start_metrics_task(&self) {
        if self.is_shutting_down() {
            return;
        }
        let mut guard = self.metrics_task.lock();
        let (task, starts) = &mut *guard;
        if task.running() || task.has_ended() {
            return;
        }
        let Some(runtime) = self.clock.runtime() else {
            return;
        };
        *starts += 1;
        let live = Live::new(self.metrics_live.clone(), *starts);
        if !task.start(runtime, metrics_loop(self.me.clone(), live)) {
            debug!(queue = %self.name, "the queue's runtime has shut down: no metrics task");
        }
    }

    /// Sets the unfinished-work gauges from the items in progress.
    fn update_unfinished_work(&self) {
        let now = self.clock.now();
        let state = self.lock();
        let (total, longest) = state.recorder.unfinished_work(now);
        state.recorder.set_unfinished_work(total, longest);
    }
}

/// Says which start of the task runs while its future lives: its number is set when made and
/// cleared when the future is dropped (stopped, or dropped by its runtime's shutdown), unless
/// a later start replaced it already.
struct Live {
    flag: Arc<AtomicU64>,
    start: u64,
}

impl Live {
    fn new(flag: Arc<AtomicU64>, start: u64) -> Self {
        flag.store(start, Ordering::Release);
        Live { flag, start }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self
            .flag
            .compare_exchange(self.start, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Refreshes the unfinished-work gauges every period until the queue is gone (or the task is
/// stopped).
async fn metrics_loop<K: QueueKey + 'static, M: Core<K>>(handle: Weak<Handle<K, M>>, live: Live) {
    let _live = live;
    let mut tick = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(handle) = handle.upgrade() else {
            return;
        };
        handle.update_unfinished_work();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use crate::WorkQueue;
    use crate::metrics::testing::RecordingProvider;

    /// While the metrics task runs, adds see it through the live flag alone (no lock); each
    /// start is numbered, and the flag is cleared when the running one ends.
    #[tokio::test(start_paused = true)]
    async fn the_live_flag_names_the_running_start_and_clears_when_it_ends() {
        let provider = Arc::new(RecordingProvider::default());
        let queue: WorkQueue<u32> = WorkQueue::builder().name("q").metrics(provider).build();
        let inner = Arc::clone(&queue.inner);
        assert_eq!(inner.metrics_live.load(Ordering::Acquire), 0, "not started");
        queue.add(1).unwrap();
        assert_eq!(
            inner.metrics_live.load(Ordering::Acquire),
            1,
            "the first start"
        );
        queue.add(2).unwrap();
        assert_eq!(inner.metrics_task.lock().1, 1, "started once");
        queue.shut_down();
        tokio::task::yield_now().await;
        assert_eq!(inner.metrics_live.load(Ordering::Acquire), 0, "ended");
    }
}
