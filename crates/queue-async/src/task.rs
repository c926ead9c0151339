//! The lifecycle every background task of the crate shares: the delay task, the metrics ticker
//! and the scheduling queue's flushes.
//!
//! A queue keeps one [`BackgroundTask`] per task in its state, under its lock:
//!
//! - [`running`](BackgroundTask::running) says whether the task is alive, and on which runtime;
//! - [`start`](BackgroundTask::start) spawns it when first needed (the caller decides on which
//!   runtime, usually the calling one, else the last one the queue used);
//! - the task ends when [`stop`](BackgroundTask::stop) is called (shutdown), when the
//!   `BackgroundTask` is dropped (the queue's last handle is gone, since the state owns it), or
//!   when its own future returns (its `Weak` to the queue no longer upgrades);
//! - if its runtime shuts down, the runtime drops the task's future, `running` turns `None`, and
//!   the next caller that needs the task starts it again in its own runtime.
//!
//! The task's future must hold the queue's state weakly (a `Weak`), so that the handles alone
//! keep the queue alive. One `oneshot` channel carries both signals: the sender is kept here,
//! the receiver lives in the task, so dropping the sender stops the task and the task's end
//! closes the sender.

use std::future::Future;

use futures::future;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// One background task of a queue: see the module docs.
#[derive(Debug, Default)]
pub(crate) struct BackgroundTask {
    /// Dropping it stops the task; closed once the task's future is gone.
    stop: Option<oneshot::Sender<()>>,
    /// The runtime the task was started on.
    runtime: Option<Handle>,
}

impl BackgroundTask {
    /// The runtime the task runs on, if it runs.
    pub(crate) fn running(&self) -> Option<&Handle> {
        match &self.stop {
            Some(stop) if !stop.is_closed() => self.runtime.as_ref(),
            _ => None,
        }
    }

    /// Whether it was started once and is no longer running (its runtime went away, or it
    /// ended); for logging a restart.
    pub(crate) fn has_ended(&self) -> bool {
        self.stop.as_ref().is_some_and(oneshot::Sender::is_closed)
    }

    /// Spawns `task` on `runtime`, replacing a previous task (which is stopped). It runs until
    /// it returns, [`stop`](Self::stop) is called, or `self` is dropped. Returns `false` if
    /// `runtime` is shutting down: then nothing runs.
    pub(crate) fn start<F>(&mut self, runtime: &Handle, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, mut stopped) = oneshot::channel::<()>();
        runtime.spawn(async move {
            // The stop signal is polled first: a stopped task does not run one more step.
            let _ = future::select(&mut stopped, std::pin::pin!(task)).await;
        });
        // A runtime that is shutting down drops a spawned future at once, closing `stop`.
        let started = !stop.is_closed();
        self.stop = started.then_some(stop);
        self.runtime = started.then(|| runtime.clone());
        started
    }

    /// Stops the task (it ends at its next poll, which this wakes).
    pub(crate) fn stop(&mut self) {
        self.stop = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_until_stopped_and_then_drops_its_future() {
        let held = Arc::new(());
        let mut task = BackgroundTask::default();
        assert!(task.running().is_none());
        assert!(!task.has_ended(), "never started");
        let h = held.clone();
        assert!(task.start(&Handle::current(), async move {
            let _h = h;
            std::future::pending::<()>().await;
        }));
        tokio::task::yield_now().await;
        assert!(task.running().is_some());
        assert!(!task.has_ended(), "running");
        assert_eq!(Arc::strong_count(&held), 2);
        task.stop();
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&held), 1, "the future was dropped");
        assert!(task.running().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_returns_is_no_longer_running() {
        let mut task = BackgroundTask::default();
        assert!(task.start(
            &Handle::current(),
            tokio::time::sleep(Duration::from_millis(1))
        ));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(task.running().is_none());
        assert!(task.has_ended());
    }

    #[test]
    fn a_task_whose_runtime_is_gone_is_not_running_and_restarts_elsewhere() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let mut task = BackgroundTask::default();
        assert!(task.start(runtime.handle(), std::future::pending()));
        assert!(task.running().is_some());
        drop(runtime);
        assert!(task.running().is_none());
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        assert!(task.start(other.handle(), std::future::pending()));
        assert!(task.running().is_some());
    }
}
