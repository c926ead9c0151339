//! The scheduling queue's timer task: one sleep until the earliest deadline (backoff expiry or
//! unschedulable leftover), and the task that serves it, [`flush_task`]. The timed moves it
//! makes are in `flush`.
//!
//! Only the task sets the sleep, so two settings never cross: a change that moves the earliest
//! deadline earlier pokes the task (`dirty`), which reads the deadline again holding no lock of
//! the timer. When the task ends while the queue is open, its runtime dropped it: the items in
//! backoff go to active at once, and later timed moves happen when a `pop` looks.

use std::future::poll_fn;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker};

use ctrlq_queue_core::Compare;
use tokio::time::{Instant, Sleep};
use tracing::{debug, trace};

use super::QueuedItem;
use super::state::{LockedScheduling, lock};
use crate::task::BackgroundTask;

/// The flush timer: one sleep until the earliest deadline, and the task that serves it.
///
/// The queue has one deadline at a time, so its timer is one [`Sleep`], reset as the deadline
/// moves. (A `DelayQueue`, which the work queues use for a timer per waiting key, would round
/// the deadline to its own millisecond ticks before the runtime's timer rounds it again.)
pub(crate) struct FlushTimer {
    /// Started once; ended while the queue is open means its runtime is gone.
    task: BackgroundTask,
    /// Made at the first deadline, in the queue's runtime, and reset from then on.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The deadline the sleep is set to; `None` when no deadline is set (the sleep, if any,
    /// is then not polled).
    armed: Option<Instant>,
    /// The earliest deadline may have changed since the task last set the timer (set at
    /// first, so that the task's first poll reads it).
    dirty: bool,
    /// The task's waker, for pokes.
    waker: Option<Waker>,
    /// The queue is shut down: no task starts.
    closed: bool,
}

impl FlushTimer {
    pub(super) fn new() -> Self {
        FlushTimer {
            task: BackgroundTask::default(),
            sleep: None,
            armed: None,
            dirty: true,
            waker: None,
            closed: false,
        }
    }

    /// Stops the task for good (the queue's shutdown).
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.task.stop();
    }

    /// The queue is open and its timer task has ended: its runtime dropped it.
    fn runtime_gone(&self) -> bool {
        !self.closed && self.task.has_ended()
    }
}

/// The timer task: each time it is woken (the sleep rang, or a poke), it makes the moves that
/// are due and sets the sleep to the next deadline, until the queue is gone or the task is
/// stopped.
async fn flush_task<K, T, C>(state: Weak<LockedScheduling<K, T, C>>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    // Unconstrained: the moves due at one instant are made in one batch, rather than cut where
    // tokio's cooperative budget runs out.
    tokio::task::unconstrained(poll_fn(|cx| match state.upgrade() {
        Some(state) => {
            state.poll_timer(cx);
            Poll::Pending
        }
        None => Poll::Ready(()),
    }))
    .await;
}

impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    /// Makes sure the timer task runs, on the queue's runtime (binding the queue to the calling
    /// one if it has none yet; with neither, it starts at the next call inside a runtime). Once
    /// the queue's runtime has shut down, no task can time the moves: they happen here, at
    /// once. Call holding no lock of the queue (a `pop` about to wait).
    pub(crate) fn ensure_flush_task(&self) {
        let mut timer = lock(&self.timer);
        if timer.closed {
            return;
        }
        if !timer.task.started() {
            self.start_task(&mut timer);
        }
        if timer.runtime_gone() {
            drop(timer);
            self.flush_without_timer();
        }
    }

    /// Tells the timer task what a change did to the deadlines. `earlier`: the earliest
    /// deadline may have moved earlier, so the task wakes to set its timer again (a later one
    /// needs nothing: the timer rings early, finds nothing due and sets the next). `start`: an
    /// item went where only a timed move takes it out, so the task starts if it has not.
    /// Callable under `main`, not under `hot`.
    pub(crate) fn poke_timer(&self, earlier: bool, start: bool) {
        let mut timer = lock(&self.timer);
        if earlier {
            timer.dirty = true;
            if let Some(waker) = timer.waker.take() {
                waker.wake();
                return;
            }
        }
        if start && !timer.closed && !timer.task.started() {
            self.start_task(&mut timer);
        }
    }

    /// Starts the timer task on the queue's runtime, once. A runtime that is shutting down
    /// drops it at once, and its end takes `hot`: call holding `timer` (which makes it start
    /// once) and perhaps `main`, never `hot`.
    fn start_task(&self, timer: &mut FlushTimer) {
        let Some(runtime) = self.clock.runtime() else {
            trace!("no tokio runtime here: the timer task starts at the next call inside one");
            return;
        };
        let ended = self.me.clone();
        if !timer
            .task
            .start(runtime, flush_task(self.me.clone()), move || {
                if let Some(state) = ended.upgrade() {
                    state.end_backoffs();
                }
            })
        {
            debug!("the queue's runtime has shut down: timed moves happen when a pop looks");
        }
    }

    /// The task's step: makes the moves due if the sleep rang, and sets it to the next
    /// deadline when that may have changed; `cx` is woken when the sleep rings, or by a poke.
    fn poll_timer(&self, cx: &mut Context<'_>) {
        loop {
            let (rang, dirty) = {
                let mut timer = lock(&self.timer);
                if !timer
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    timer.waker = Some(cx.waker().clone());
                }
                let timer = &mut *timer;
                let rang = match (&mut timer.sleep, timer.armed) {
                    (Some(sleep), Some(_)) => sleep.as_mut().poll(cx).is_ready(),
                    _ => false,
                };
                if rang {
                    timer.armed = None;
                }
                (rang, std::mem::take(&mut timer.dirty))
            };
            if !rang && !dirty {
                return;
            }
            if rang {
                self.flush_due(Instant::now());
            }
            let next = self.next_deadline();
            self.set_timer(&mut lock(&self.timer), next);
        }
    }

    /// Sets the one timer to `next` (or unsets it).
    fn set_timer(&self, timer: &mut FlushTimer, next: Option<Instant>) {
        if next == timer.armed {
            return;
        }
        timer.armed = next;
        let Some(at) = next else {
            return;
        };
        match &mut timer.sleep {
            Some(sleep) => sleep.as_mut().reset(at),
            None => {
                let Some(runtime) = self.clock.runtime() else {
                    timer.armed = None;
                    return;
                };
                // A sleep belongs to the runtime it is made in: the queue's.
                let _runtime = runtime.enter();
                timer.sleep = Some(Box::pin(tokio::time::sleep_until(at)));
            }
        }
    }

    /// The timer task ended. If the queue is open, its runtime dropped the task (it shut down):
    /// no timer will ring, so every item in backoff goes to active now, and a waiting `pop` is
    /// woken. Takes `hot` only.
    fn end_backoffs(&self) {
        let now = self.clock.now();
        let moved = {
            let mut hot = lock(&self.hot);
            if hot.is_closed() {
                return;
            }
            self.rules.flush_backoff_all(&mut hot, now)
        };
        debug!("the queue's runtime shut down: timed moves happen at once");
        if moved > 0 {
            self.pop_wake.notify_waiters();
        }
    }
}
