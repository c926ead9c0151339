//! A queue's runtime: the clock its calls read and the timer task it runs there.
//!
//! # The clock
//!
//! [`QueueClock`] reads tokio's clock as the queue's runtime sees it, from any thread.
//! `tokio::time::Instant::now()` reads the clock of the runtime the calling thread is in, and
//! the real clock on a plain thread. Under paused time (tests) the two differ by however far
//! the test has advanced, so a call from a plain thread (a synchronous callback, a helper
//! thread) would stamp its item in the paused clock's past: an hour ahead, a 1 s backoff would
//! be over at once. The queue's clock reads its runtime's clock instead.
//!
//! # The timer task
//!
//! The timer task is the one background task of a queue. It serves every deadline of the queue
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
use std::sync::{OnceLock, Weak};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::time::Instant;

/// The workspace's one far-future limit, [`ctrlq_queue_core::MAX_DELAY`]: the longest delay
/// honoured by delayed adds (longer delays are clamped to it).
pub use ctrlq_queue_core::MAX_DELAY;

/// A queue's runtime and clock.
///
/// A queue is bound to one runtime: the one it was built in, or, for a queue built outside any
/// runtime, the first one a call of the queue needs (to start a background task, or to read
/// the clock from a plain thread). The binding never changes: the queue's background tasks run
/// there, and a call from a plain thread reads that runtime's clock.
#[derive(Debug)]
pub(crate) struct QueueClock {
    runtime: OnceLock<Handle>,
}

impl QueueClock {
    /// A clock bound to the current runtime, if there is one (else bound later).
    pub(crate) fn new() -> Self {
        let runtime = OnceLock::new();
        if let Ok(current) = Handle::try_current() {
            let _ = runtime.set(current);
        }
        QueueClock { runtime }
    }

    /// Now, by the calling task's runtime; outside any runtime, by the queue's runtime (the
    /// real clock if it is not bound yet).
    pub(crate) fn now(&self) -> Instant {
        self.in_runtime(Instant::now)
    }

    /// Runs `f` (which reads tokio's clock, say a rate limiter) in the calling task's runtime;
    /// outside any runtime, inside the queue's runtime (as is, if it is not bound yet).
    pub(crate) fn in_runtime<R>(&self, f: impl FnOnce() -> R) -> R {
        // Inside a task (the usual caller), `try_id` is a thread-local read; the fallback
        // clones a handle, so it comes second.
        if tokio::task::try_id().is_some() || Handle::try_current().is_ok() {
            return f();
        }
        match self.runtime.get() {
            Some(runtime) => {
                let _in_runtime = runtime.enter();
                f()
            }
            None => f(),
        }
    }

    /// The queue's runtime, binding the queue to the calling thread's runtime if it has none
    /// yet (`None` if neither exists). The runtime may have shut down: a task spawned there
    /// is dropped at once (see [`crate::runtime`]).
    pub(crate) fn runtime(&self) -> Option<&Handle> {
        if let Some(bound) = self.runtime.get() {
            return Some(bound);
        }
        let current = Handle::try_current().ok()?;
        Some(self.runtime.get_or_init(|| current))
    }
}

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
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_plain_thread_reads_the_queue_runtime_paused_clock() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let clock = runtime.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            QueueClock::new()
        });
        let paused = runtime.block_on(async { Instant::now() });
        let read = std::thread::scope(|s| s.spawn(|| clock.now()).join().expect("no panic"));
        assert_eq!(read, paused, "the paused clock, not the real one");
    }

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
    }

    fn read_on_a_plain_thread(clock: &QueueClock) -> Instant {
        std::thread::scope(|s| s.spawn(|| clock.now()).join().expect("no panic"))
    }

    #[test]
    fn a_clock_built_outside_a_runtime_binds_to_the_first_that_asks_and_keeps_it() {
        let clock = QueueClock::new();
        assert!(clock.runtime().is_none(), "no runtime anywhere yet");
        let (first, second) = (paused_runtime(), paused_runtime());
        let first_now = first.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            assert!(clock.runtime().is_some(), "bound here");
            Instant::now()
        });
        let second_now = second.block_on(async {
            assert!(clock.runtime().is_some());
            Instant::now()
        });
        assert!(second_now < first_now, "the two paused clocks differ");
        assert_eq!(
            read_on_a_plain_thread(&clock),
            first_now,
            "still the first runtime's clock: the binding did not move"
        );
    }

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
