//! The scheduling queue's flush timer: one sleep until its earliest deadline, and the task
//! that serves it. The timed moves it drives are in `flush`.

use std::pin::Pin;
use std::task::Waker;

use tokio::time::{Instant, Sleep};

use crate::task::BackgroundTask;

/// The flush timer: one sleep until the earliest deadline (backoff expiry or unschedulable
/// leftover), and the task that serves it.
///
/// The queue has one deadline at a time, so its timer is one [`Sleep`], reset as the deadline
/// moves, as the work queues' one sleep at their earliest waiting key.
pub(crate) struct FlushTimer {
    pub(super) task: BackgroundTask,
    /// Made at the first deadline, in the queue's runtime, and reset from then on.
    pub(super) sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline the sleep is set to; `None` when no deadline is set (the sleep, if any,
    /// is then not polled).
    pub(super) armed: Option<Instant>,
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
            sleep: None,
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
