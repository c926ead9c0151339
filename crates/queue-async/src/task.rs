//! [`BackgroundTask`]: the lifecycle every background task of the crate shares (each queue's
//! timer task and the metrics ticker).
//!
//! A queue keeps one [`BackgroundTask`] per task in its state:
//!
//! - [`start`](BackgroundTask::start) spawns it on the queue's runtime when first needed. A
//!   queue is bound to its runtime (see [`QueueClock`](crate::clock)), so a task starts at
//!   most once: one that has ended is not started again;
//! - the task ends when [`stop`](BackgroundTask::stop) is called (shutdown), when the
//!   `BackgroundTask` is dropped (the queue's last handle is gone, since the state owns it),
//!   when its own future returns (its `Weak` to the queue no longer upgrades), or when the
//!   runtime drops its future (the runtime shuts down, or was shutting down at the start);
//! - [`has_ended`](BackgroundTask::has_ended) then reads `true`, and the task's `on_end` runs,
//!   whatever ended it, even before its first poll. A task that ended while its queue is not
//!   shut down says that the queue's runtime is gone: no task of the queue times anything any
//!   more.
//!
//! The task's future must hold the queue's state weakly (a `Weak`), so that the handles alone
//! keep the queue alive. One `oneshot` channel carries both signals: the sender is kept here,
//! the receiver lives in the task, so dropping the sender stops the task and the task's end
//! closes the sender. The receiver is closed before `on_end` runs, so a caller that sees the
//! task running, under a lock that `on_end` takes, acts before `on_end` does.
//!
//! `on_end` may run inside `start` (a runtime that is shutting down drops the future there), on
//! the thread that drops the runtime, or on the runtime: `start` must be called holding no lock
//! that `on_end` takes.

use std::future::Future;

use futures::future;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// One background task of a queue: see the module docs.
#[derive(Debug, Default)]
pub(crate) struct BackgroundTask {
    /// Dropping it stops the task; closed once the task's future is gone.
    stop: Option<oneshot::Sender<()>>,
}

/// Lives in the task's future: when the future is dropped, closes the task's channel, then
/// runs `on_end`.
struct OnEnd<E: FnOnce()> {
    stopped: oneshot::Receiver<()>,
    on_end: Option<E>,
}

impl BackgroundTask {
    /// Whether the task was started (it may have ended since).
    pub(crate) fn started(&self) -> bool {
        self.stop.is_some()
    }

    /// Whether the task runs.
    pub(crate) fn running(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| !stop.is_closed())
    }

    /// Whether it was started and is no longer running.
    pub(crate) fn has_ended(&self) -> bool {
        self.stop.as_ref().is_some_and(oneshot::Sender::is_closed)
    }

    /// Spawns `task` on `runtime`, replacing a previous task (which is stopped). It runs until
    /// it returns, [`stop`](Self::stop) is called, `self` is dropped, or the runtime drops it;
    /// then `on_end` runs. Returns `false` if `runtime` is shutting down: then `on_end` has run
    /// already and nothing runs.
    pub(crate) fn start<F, E>(&mut self, runtime: &Handle, task: F, on_end: E) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
        E: FnOnce() + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let end = OnEnd {
            stopped,
            on_end: Some(on_end),
        };
        runtime.spawn(async move {
            let mut end = end;
            // The stop signal is polled first: a stopped task does not run one more step.
            let _ = future::select(&mut end.stopped, std::pin::pin!(task)).await;
        });
        // A runtime that is shutting down drops a spawned future at once, closing `stop`.
        let started = !stop.is_closed();
        // Kept even if closed: `has_ended` then says the runtime is gone.
        self.stop = Some(stop);
        started
    }

    /// Stops the task (it ends at its next poll, which this wakes).
    pub(crate) fn stop(&mut self) {
        self.stop = None;
    }
}

impl<E: FnOnce()> Drop for OnEnd<E> {
    fn drop(&mut self) {
        self.stopped.close();
        if let Some(on_end) = self.on_end.take() {
            on_end();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_until_stopped_and_then_drops_its_future() {
        let held = Arc::new(());
        let mut task = BackgroundTask::default();
        assert!(!task.running());
        assert!(!task.has_ended(), "never started");
        let h = held.clone();
        assert!(task.start(
            &Handle::current(),
            async move {
                let _h = h;
                std::future::pending::<()>().await;
            },
            || {}
        ));
        tokio::task::yield_now().await;
        assert!(task.running());
        assert!(!task.has_ended(), "running");
        assert_eq!(Arc::strong_count(&held), 2);
        task.stop();
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&held), 1, "the future was dropped");
        assert!(!task.running());
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_returns_is_no_longer_running() {
        let mut task = BackgroundTask::default();
        assert!(task.start(
            &Handle::current(),
            tokio::time::sleep(Duration::from_millis(1)),
            || {}
        ));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!task.running());
        assert!(task.has_ended());
    }

    #[test]
    fn a_task_whose_runtime_is_gone_is_not_running_and_none_starts_there() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        let mut task = BackgroundTask::default();
        assert!(task.start(&handle, std::future::pending(), || {}));
        assert!(task.running());
        drop(runtime);
        assert!(!task.running());
        assert!(task.has_ended());
        assert!(
            !task.start(&handle, std::future::pending(), || {}),
            "dropped at once"
        );
        assert!(!task.running());
        assert!(task.has_ended(), "so that no caller tries there again");
    }

    /// Counts the polls of a task's future and the runs of its `on_end`.
    #[derive(Default)]
    struct Counting {
        polls: AtomicUsize,
        ended: AtomicUsize,
    }

    /// Starts a task on `runtime` that counts its polls in `state` and never returns.
    fn start_counting(task: &mut BackgroundTask, runtime: &Handle, state: &Arc<Counting>) -> bool {
        let (polled, ended) = (state.clone(), state.clone());
        task.start(
            runtime,
            poll_fn(move |_| {
                polled.polls.fetch_add(1, Ordering::SeqCst);
                Poll::Pending
            }),
            move || {
                ended.ended.fetch_add(1, Ordering::SeqCst);
            },
        )
    }

    #[test]
    fn on_end_runs_when_the_runtime_drops_the_task() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_counting(&mut task, runtime.handle(), &state));
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(
            state.polls.load(Ordering::SeqCst),
            1,
            "polled once, then pending"
        );
        assert_eq!(state.ended.load(Ordering::SeqCst), 0);
        drop(runtime);
        assert_eq!(state.ended.load(Ordering::SeqCst), 1, "run once");
        assert!(!task.running());
    }

    #[test]
    fn on_end_runs_when_the_task_is_dropped_before_its_first_poll() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_counting(&mut task, runtime.handle(), &state));
        drop(runtime);
        assert_eq!(state.polls.load(Ordering::SeqCst), 0, "it never ran");
        assert_eq!(state.ended.load(Ordering::SeqCst), 1, "run all the same");
    }

    #[test]
    fn a_task_started_on_a_shut_down_runtime_fails_and_has_run_on_end() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        drop(runtime);
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(!start_counting(&mut task, &handle, &state));
        assert_eq!(state.ended.load(Ordering::SeqCst), 1, "inside `start`");
        assert!(!task.running());
        assert!(task.has_ended());
    }

    #[tokio::test(start_paused = true)]
    async fn on_end_runs_when_the_task_is_stopped_too() {
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_counting(&mut task, &Handle::current(), &state));
        tokio::task::yield_now().await;
        task.stop();
        tokio::task::yield_now().await;
        assert_eq!(state.ended.load(Ordering::SeqCst), 1);
        assert!(!task.running());
    }
}
