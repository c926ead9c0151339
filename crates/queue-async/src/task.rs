//! The lifecycle every background task of the crate shares (the timer tasks and the metrics
//! ticker), and the timer task itself.
//!
//! A queue keeps one [`BackgroundTask`] per task in its state, under its lock:
//!
//! - [`running`](BackgroundTask::running) says whether the task is alive;
//! - [`start`](BackgroundTask::start) spawns it on the queue's runtime when first needed;
//! - the task ends when [`stop`](BackgroundTask::stop) is called (shutdown), when the
//!   `BackgroundTask` is dropped (the queue's last handle is gone, since the state owns it), or
//!   when its own future returns (its `Weak` to the queue no longer upgrades);
//! - if the queue's runtime shuts down, the runtime drops the task's future and `running`
//!   turns `false`. A queue is bound to its runtime (see [`QueueClock`](crate::clock)), so no
//!   task of it starts again.
//!
//! The task's future must hold the queue's state weakly (a `Weak`), so that the handles alone
//! keep the queue alive. One `oneshot` channel carries both signals: the sender is kept here,
//! the receiver lives in the task, so dropping the sender stops the task and the task's end
//! closes the sender.
//!
//! # The timer task
//!
//! Every deadline of every queue kind (delayed adds, backoff expiries, unschedulable
//! leftovers) is served by one tokio sleep at the earliest deadline, which the queue's state
//! owns and only the task resets: a change that sets an earlier deadline wakes the task (see
//! the crate's docs). [`start_timer_task`] starts the one task that serves them, for any [`Timed`]
//! state: each time it is woken it has the state poll its timers, and when the runtime drops
//! it, it tells the state, which then serves its deadlines without timers (see
//! [`Timed::timers_gone`]).

use std::future::{Future, poll_fn};
use std::sync::atomic::{AtomicU8, Ordering as AtomicOrdering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures::future;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// One background task of a queue: see the module docs.
#[derive(Debug, Default)]
pub(crate) struct BackgroundTask {
    /// Dropping it stops the task; closed once the task's future is gone.
    stop: Option<oneshot::Sender<()>>,
}

impl BackgroundTask {
    /// Whether the task runs.
    pub(crate) fn running(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| !stop.is_closed())
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
        self.stop = Some(stop);
        started
    }

    /// Stops the task (it ends at its next poll, which this wakes).
    pub(crate) fn stop(&mut self) {
        self.stop = None;
    }
}

/// A queue state whose deadlines are timers served by [`timer_task`].
pub(crate) trait Timed: Send + Sync + 'static {
    /// Takes what is due and acts on it; `cx` is woken at the next timer, and when a timer is
    /// set earlier (the state's timers keep the waker).
    fn poll_timers(&self, cx: &mut Context<'_>);

    /// The task's future was dropped, by its runtime's shutdown or by [`BackgroundTask::stop`]
    /// (the queue's shutdown): no timer will ring any more. Called from the dropping thread,
    /// holding no lock of the state.
    fn timers_gone(&self);
}

/// Starts the timer task of `state` on `runtime`: it serves the state's timers until the
/// state is gone or the task is stopped, and tells the state (see [`Timed::timers_gone`]) if
/// its future is dropped after this returned `true`, even before its first poll. Returns
/// `false`, having told nothing, if the runtime dropped it already (it is shutting down).
pub(crate) fn start_timer_task<S: Timed>(
    task: &mut BackgroundTask,
    runtime: &Handle,
    state: Weak<S>,
) -> bool {
    let armed = Arc::new(AtomicU8::new(UNARMED));
    let gone = Gone {
        state: state.clone(),
        armed: armed.clone(),
    };
    let serve = async move {
        let _gone = gone;
        // Unconstrained: the deadlines due at one instant are served in one batch, in order,
        // rather than cut where tokio's cooperative budget runs out.
        tokio::task::unconstrained(poll_fn(|cx| match state.upgrade() {
            Some(state) => {
                state.poll_timers(cx);
                Poll::Pending
            }
            None => Poll::Ready(()),
        }))
        .await;
    };
    // A runtime that is shutting down drops the future inside `spawn`, where the caller holds
    // the state's lock: `Gone` is armed only after, and whichever of arming and dropping comes
    // second sees the other.
    task.start(runtime, serve)
        && armed
            .compare_exchange(
                UNARMED,
                ARMED,
                AtomicOrdering::AcqRel,
                AtomicOrdering::Acquire,
            )
            .is_ok()
}

const UNARMED: u8 = 0;
const ARMED: u8 = 1;
const DROPPED: u8 = 2;

/// Tells the state when the timer task's future is dropped, once armed.
struct Gone<S: Timed> {
    state: Weak<S>,
    armed: Arc<AtomicU8>,
}

impl<S: Timed> Drop for Gone<S> {
    fn drop(&mut self) {
        if self.armed.swap(DROPPED, AtomicOrdering::AcqRel) == ARMED
            && let Some(state) = self.state.upgrade()
        {
            state.timers_gone();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_until_stopped_and_then_drops_its_future() {
        let held = Arc::new(());
        let mut task = BackgroundTask::default();
        assert!(!task.running());
        let h = held.clone();
        assert!(task.start(&Handle::current(), async move {
            let _h = h;
            std::future::pending::<()>().await;
        }));
        tokio::task::yield_now().await;
        assert!(task.running());
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
            tokio::time::sleep(Duration::from_millis(1))
        ));
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!task.running());
    }

    #[test]
    fn a_task_whose_runtime_is_gone_is_not_running_and_none_starts_there() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        let mut task = BackgroundTask::default();
        assert!(task.start(&handle, std::future::pending()));
        assert!(task.running());
        drop(runtime);
        assert!(!task.running());
        assert!(
            !task.start(&handle, std::future::pending()),
            "dropped at once"
        );
        assert!(!task.running());
    }

    /// Counts its polls and how often it was told its timers are gone.
    #[derive(Default)]
    struct Counting {
        polls: AtomicUsize,
        gone: AtomicUsize,
    }

    impl Timed for Counting {
        fn poll_timers(&self, _cx: &mut Context<'_>) {
            self.polls.fetch_add(1, Ordering::SeqCst);
        }
        fn timers_gone(&self) {
            self.gone.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_timer_task_tells_its_state_when_the_runtime_drops_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_timer_task(
            &mut task,
            runtime.handle(),
            Arc::downgrade(&state)
        ));
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(
            state.polls.load(Ordering::SeqCst),
            1,
            "polled once, then pending"
        );
        assert_eq!(state.gone.load(Ordering::SeqCst), 0);
        drop(runtime);
        assert_eq!(state.gone.load(Ordering::SeqCst), 1, "told once");
        assert!(!task.running());
    }

    #[test]
    fn a_timer_task_dropped_before_its_first_poll_tells_its_state() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_timer_task(
            &mut task,
            runtime.handle(),
            Arc::downgrade(&state)
        ));
        drop(runtime);
        assert_eq!(state.polls.load(Ordering::SeqCst), 0, "it never ran");
        assert_eq!(state.gone.load(Ordering::SeqCst), 1, "told all the same");
    }

    #[test]
    fn a_timer_task_started_on_a_shut_down_runtime_fails_and_tells_nothing() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let handle = runtime.handle().clone();
        drop(runtime);
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(!start_timer_task(
            &mut task,
            &handle,
            Arc::downgrade(&state)
        ));
        assert_eq!(state.gone.load(Ordering::SeqCst), 0);
        assert!(!task.running());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_timer_task_tells_its_state_too() {
        let state = Arc::new(Counting::default());
        let mut task = BackgroundTask::default();
        assert!(start_timer_task(
            &mut task,
            &Handle::current(),
            Arc::downgrade(&state)
        ));
        tokio::task::yield_now().await;
        task.stop();
        tokio::task::yield_now().await;
        assert_eq!(state.gone.load(Ordering::SeqCst), 1);
        assert!(!task.running());
    }
}
