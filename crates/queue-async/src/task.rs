//! The timer task: the one background task of a queue. It serves every deadline of the queue
//! (delayed adds, backoff expiries, unschedulable leftovers) with one tokio sleep at the
//! earliest, which the queue's state owns and only the task resets: a change that sets an
//! earlier deadline wakes the task (see the crate's docs). With metrics it also refreshes the
//! gauges.
//!
//! The task starts when first needed, on the queue's runtime (see the crate's
//! [Time](crate#time)), and holds the queue's state weakly, so that the handles alone keep the
//! queue alive. It ends when the queue shuts down (its poll returns `Ready`), when the last
//! handle is dropped (the state's drop wakes it, and its `Weak` no longer upgrades), or when its
//! runtime drops it, shutting down. However it ends, its last act is to tell the state
//! ([`Timed::task_ended`]), which ends every wait then, since no timer rings for the queue any
//! more. A queue whose runtime has shut down spawns its task there again at its next need: the
//! runtime drops it at once, inside `spawn`, which tells the state. That is why the state
//! spawns it only with its lock released.

use std::future::poll_fn;
use std::sync::Weak;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

/// A queue state whose deadlines the timer task serves.
pub(crate) trait Timed: Send + Sync + 'static {
    /// Acts on what is due; `cx` is woken at the next deadline, and when one is set earlier
    /// (the state keeps the waker). `Ready` once the queue is shut down: the task ends.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()>;

    /// The task ended (see the module docs). Called with no lock of the state held.
    fn task_ended(&self);
}

/// Spawns the timer task of `state` on `runtime`. Call with the state's lock released.
pub(crate) fn spawn_timer_task<S: Timed>(runtime: &Handle, state: Weak<S>) {
    let ended = Ended(state);
    runtime.spawn(async move {
        let ended = ended;
        // Unconstrained: the deadlines due at one instant are served in one batch, in order,
        // rather than cut where tokio's cooperative budget runs out.
        tokio::task::unconstrained(poll_fn(|cx| match ended.0.upgrade() {
            Some(state) => state.poll_timers(cx),
            None => Poll::Ready(()),
        }))
        .await;
    });
}

/// Tells the state when the timer task's future is dropped, whether it ended or its runtime
/// dropped it.
struct Ended<S: Timed>(Weak<S>);

impl<S: Timed> Drop for Ended<S> {
    fn drop(&mut self) {
        if let Some(state) = self.0.upgrade() {
            state.task_ended();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// Counts its polls and its task's ends; its poll returns `Ready` once `done` is set.
    #[derive(Default)]
    struct Counting {
        polls: AtomicUsize,
        ended: AtomicUsize,
        done: AtomicBool,
    }

    impl Timed for Counting {
        fn poll_timers(&self, _cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.done.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
        fn task_ended(&self) {
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn the_task_tells_its_state_once_when_its_runtime_drops_it() {
        let runtime = runtime();
        let state = Arc::new(Counting::default());
        spawn_timer_task(runtime.handle(), Arc::downgrade(&state));
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(
            state.polls.load(Ordering::SeqCst),
            1,
            "polled, then pending"
        );
        assert_eq!(state.ended.load(Ordering::SeqCst), 0);
        drop(runtime);
        assert_eq!(state.ended.load(Ordering::SeqCst), 1, "told once");
    }

    #[test]
    fn a_task_spawned_on_a_shut_down_runtime_tells_its_state_inside_spawn() {
        let runtime = runtime();
        let handle = runtime.handle().clone();
        drop(runtime);
        let state = Arc::new(Counting::default());
        spawn_timer_task(&handle, Arc::downgrade(&state));
        assert_eq!(state.polls.load(Ordering::SeqCst), 0, "it never ran");
        assert_eq!(state.ended.load(Ordering::SeqCst), 1, "told at once");
    }

    #[test]
    fn a_task_whose_poll_is_ready_ends_and_tells_its_state() {
        let runtime = runtime();
        let state = Arc::new(Counting::default());
        state.done.store(true, Ordering::SeqCst);
        spawn_timer_task(runtime.handle(), Arc::downgrade(&state));
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(state.polls.load(Ordering::SeqCst), 1);
        assert_eq!(state.ended.load(Ordering::SeqCst), 1);
        assert_eq!(runtime.metrics().num_alive_tasks(), 0, "the task ended");
    }

    #[test]
    fn a_task_whose_state_is_gone_ends_without_polling_it() {
        let runtime = runtime();
        let state = Arc::new(Counting::default());
        spawn_timer_task(runtime.handle(), Arc::downgrade(&state));
        let weak = Arc::downgrade(&state);
        drop(state);
        runtime.block_on(tokio::task::yield_now());
        assert!(weak.upgrade().is_none());
        assert_eq!(runtime.metrics().num_alive_tasks(), 0, "the task ended");
    }
}
