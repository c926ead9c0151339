//! The time of every queue: [`QueueClock`], the runtime a queue is bound to and the clock its
//! calls read, and [`Timer`], one sleep at the queue's earliest deadline and the one background
//! task that serves it.
//!
//! # The clock
//!
//! `tokio::time::Instant::now()` reads the clock of the runtime the calling thread is in, and
//! the real clock on a plain thread. Under paused time (tests) the two differ by however far
//! the test has advanced, so a call from a plain thread (a synchronous callback, a helper
//! thread) would stamp its item in the paused clock's past: an hour ahead, a 1 s backoff would
//! be over at once. [`QueueClock`] reads the queue's runtime's clock instead.
//!
//! # The timer
//!
//! A queue's state owns one [`Timer`], under the queue's lock, for every deadline it has
//! (delayed adds, backoff expiries, unschedulable leftovers, the metrics' refresh). After a
//! change the state tells the timer its earliest deadline ([`Timer::arm`]): with none, the
//! sleep is dropped (an idle queue holds no timer, so paused time never stops on it); one
//! earlier than the sleep's wakes the task. Only the task sets the sleep ([`Timer::poll`]), so
//! two changes never cross: each time it is woken, it acts on what is due by the clock and sets
//! the sleep to the next deadline. A later deadline needs no wake-up: the sleep rings early,
//! finds nothing due, and is set again.
//!
//! The task starts at the queue's first need ([`Timer::start`]), on the queue's runtime, and
//! holds the queue's state weakly, so the handles alone keep the queue alive. It ends when its
//! queue ends: at shutdown ([`Timer::end`] wakes it, and its poll returns `Ready`), and when the
//! last handle is dropped (the timer's drop wakes it, and its `Weak` no longer upgrades).
//!
//! A queue's timers belong to its runtime, as tokio's do: once that runtime has shut down
//! nothing times the queue, so a key waiting for its delay waits until an add of it or the
//! queue's shutdown, and a scheduling queue's timed moves wait for a call that makes them.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

/// A queue's runtime and clock.
///
/// A queue is bound to one runtime: the one it was built in, or, for a queue built outside any
/// runtime, the first one a call of the queue needs (to start its timer's task, or to read the
/// clock from a plain thread). The binding never changes: the task runs there, and a call from
/// a plain thread reads that runtime's clock.
#[derive(Debug)]
pub(crate) struct QueueClock {
    runtime: OnceLock<Handle>,
}

/// The one sleep of a queue, at its earliest deadline, and the task that serves it. See the
/// module docs.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    /// The sleep until the deadline the task last set, made by the task in the queue's
    /// runtime; `None` while no deadline is set.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The task's waker, taken by the wake-up of an earlier deadline or of the queue's end.
    waker: Option<Waker>,
    /// The task was spawned (it runs until its queue ends, or with its runtime).
    started: bool,
}

/// A queue state whose deadlines a [`Timer`]'s task serves.
pub(crate) trait Timed: Send + Sync + 'static {
    /// Acts on what is due by the clock, then has the timer wake `cx` at the next deadline
    /// ([`Timer::poll`]). `Ready` once the queue is shut down: the task ends.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()>;
}

// ===== impl QueueClock =====

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
    /// yet (`None` if neither exists).
    fn runtime(&self) -> Option<&Handle> {
        if let Some(bound) = self.runtime.get() {
            return Some(bound);
        }
        let current = Handle::try_current().ok()?;
        Some(self.runtime.get_or_init(|| current))
    }
}

// ===== impl Timer =====

impl Timer {
    /// Spawns the task that serves `owner`'s deadlines on the queue's runtime, unless it was:
    /// `false` with no runtime to run it (none bound and none on this thread).
    pub(crate) fn start<S: Timed>(&mut self, clock: &QueueClock, owner: &Weak<S>) -> bool {
        if self.started {
            return true;
        }
        let Some(runtime) = clock.runtime() else {
            return false;
        };
        self.started = true;
        let owner = owner.clone();
        // Unconstrained: the deadlines due at one instant are served in one batch, in order,
        // rather than cut where tokio's cooperative budget runs out.
        runtime.spawn(tokio::task::unconstrained(poll_fn(move |cx| {
            match owner.upgrade() {
                Some(owner) => owner.poll_timers(cx),
                None => Poll::Ready(()),
            }
        })));
        true
    }

    /// The queue's earliest deadline is now `next`: with none, the sleep is dropped; one
    /// earlier than the sleep's (or with no sleep) wakes the task, which sets the sleep again.
    pub(crate) fn arm(&mut self, next: Option<Instant>) {
        let Some(next) = next else {
            self.sleep = None;
            return;
        };
        if self
            .sleep
            .as_ref()
            .is_none_or(|sleep| next < sleep.deadline())
            && let Some(waker) = self.waker.take()
        {
            waker.wake();
        }
    }

    /// Called by the task once it acted on what was due at `now`: keeps the task's waker and
    /// sets the sleep to `next`, where `cx` is woken (at once if `next` is not after `now`, or
    /// has passed since); with no `next`, drops the sleep.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, next: Option<Instant>, now: Instant) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        let Some(next) = next else {
            self.sleep = None;
            return;
        };
        if next <= now {
            cx.waker().wake_by_ref();
            return;
        }
        // The task runs in the queue's runtime: the sleep belongs to it.
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }

    /// The queue shut down: drops the sleep and wakes the task, whose poll returns `Ready`.
    pub(crate) fn end(&mut self) {
        self.sleep = None;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The last handle is gone: the task is woken and ends.
impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use parking_lot::Mutex;

    use super::*;

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
    fn a_plain_thread_reads_the_queue_runtime_paused_clock() {
        let runtime = paused_runtime();
        let clock = runtime.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            QueueClock::new()
        });
        let paused = runtime.block_on(async { Instant::now() });
        assert_eq!(
            read_on_a_plain_thread(&clock),
            paused,
            "the paused clock, not the real one"
        );
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

    /// A state that counts its task's polls and holds its timer, set to `next`; its poll
    /// returns `Ready` once `done` is set.
    #[derive(Default)]
    struct Counting {
        polls: AtomicUsize,
        done: AtomicBool,
        next: Mutex<Option<Instant>>,
        timer: Mutex<Timer>,
    }

    impl Timed for Counting {
        fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.done.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            let next = *self.next.lock();
            self.timer.lock().poll(cx, next, Instant::now());
            Poll::Pending
        }
    }

    /// `state` with its task started on a current-thread runtime.
    fn started(state: &Arc<Counting>) -> tokio::runtime::Runtime {
        let runtime = paused_runtime();
        let clock = runtime.block_on(async { QueueClock::new() });
        let mut timer = state.timer.lock();
        assert!(timer.start(&clock, &Arc::downgrade(state)));
        assert!(timer.start(&clock, &Arc::downgrade(state)), "started once");
        drop(timer);
        runtime
    }

    #[test]
    fn a_task_whose_poll_is_ready_ends() {
        let state = Arc::new(Counting::default());
        state.done.store(true, Ordering::SeqCst);
        let runtime = started(&state);
        runtime.block_on(tokio::task::yield_now());
        assert_eq!(state.polls.load(Ordering::SeqCst), 1);
        assert_eq!(runtime.metrics().num_alive_tasks(), 0, "the task ended");
    }

    #[test]
    fn a_task_whose_state_is_gone_ends_without_polling_it() {
        let state = Arc::new(Counting::default());
        let runtime = started(&state);
        let weak = Arc::downgrade(&state);
        drop(state);
        runtime.block_on(tokio::task::yield_now());
        assert!(weak.upgrade().is_none());
        assert_eq!(runtime.metrics().num_alive_tasks(), 0, "the task ended");
    }

    #[test]
    fn an_earlier_deadline_and_the_end_wake_the_task_a_later_one_does_not() {
        let state = Arc::new(Counting::default());
        let runtime = started(&state);
        let polls = || state.polls.load(Ordering::SeqCst);
        let arm = |at: Option<Instant>| {
            *state.next.lock() = at;
            state.timer.lock().arm(at);
        };
        runtime.block_on(async {
            tokio::task::yield_now().await;
            assert_eq!(polls(), 1, "polled once, then waiting");
            let start = Instant::now();
            arm(Some(start + Duration::from_secs(10)));
            tokio::task::yield_now().await;
            assert_eq!(
                polls(),
                2,
                "no sleep was set: a deadline wakes it, and it sets one"
            );
            arm(Some(start + Duration::from_secs(20)));
            tokio::task::yield_now().await;
            assert_eq!(polls(), 2, "a later deadline: the sleep will ring early");
            arm(Some(start + Duration::from_secs(5)));
            tokio::task::yield_now().await;
            assert_eq!(polls(), 3, "an earlier deadline wakes it");
            arm(None);
            tokio::task::yield_now().await;
            assert_eq!(
                polls(),
                3,
                "no deadline: the sleep is dropped, nothing wakes it"
            );
            state.done.store(true, Ordering::SeqCst);
            state.timer.lock().end();
            tokio::task::yield_now().await;
            assert_eq!(polls(), 4, "the end woke it");
        });
        assert_eq!(runtime.metrics().num_alive_tasks(), 0, "the task ended");
    }
}
