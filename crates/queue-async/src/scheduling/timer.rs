//! The scheduling queue's flush timer: one `DelayQueue` entry at its earliest deadline, and
//! the task that serves it. The timed moves it drives are in `flush`.

use std::task::Waker;

use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::task::BackgroundTask;

/// The flush timer: one `DelayQueue` entry at the earliest deadline (backoff expiry or
/// unschedulable leftover), and the task that serves it.
pub(crate) struct FlushTimer {
    pub(super) task: BackgroundTask,
    pub(super) queue: DelayQueue<()>,
    /// The deadline the timer is set to, and its `DelayQueue` key.
    pub(super) armed: Option<(Instant, delay_queue::Key)>,
    /// The earliest deadline may have changed since the task last set the timer.
    pub(super) dirty: bool,
    /// The task's waker, for pokes.
    pub(super) waker: Option<Waker>,
    /// The queue is shut down: no task starts.
    pub(super) closed: bool,
    /// The queue's runtime dropped the task: no task starts again.
    pub(super) runtime_gone: bool,
}

impl FlushTimer {
    pub(super) fn new() -> Self {
        FlushTimer {
            task: BackgroundTask::default(),
            queue: DelayQueue::new(),
            armed: None,
            dirty: false,
            waker: None,
            closed: false,
            runtime_gone: false,
        }
    }

    /// Stops the task for good (the queue's shutdown).
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.task.stop();
    }
}
