//! The timed moves: backoff expiry and the unschedulable leftover, as plain `flush_*` steps
//! tests can call, and the timer task's side of them: one sleep until the earliest deadline
//! (see [`crate::task`]).

use std::hash::Hash;
use std::task::Context;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::machine::{ClusterEvent, EventPayload};

use super::QueuedItem;
use super::state::{LockedScheduling, lock};
use super::timer::FlushTimer;
use crate::task::{Timed, start_timer_task};

impl<K, T, C> LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    pub(crate) fn flush_backoff_completed(&self, now: Instant) -> usize {
        let count = self
            .rules
            .flush_backoff_completed(&mut lock(&self.hot), now);
        if count > 0 {
            trace!(count, "backoff completed");
            crate::count::wake();
            self.pop_wake.notify_waiters();
        }
        count
    }

    /// The timer task's next deadline: the earlier of the backoff head's expiry and the next
    /// leftover deadline; `None` when neither exists (then the task waits for a poke only).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let leftover = lock(&self.main).next_leftover();
        let backoff = lock(&self.hot).next_expiry();
        match (leftover, backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
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
    /// once (see [`Timed::timers_gone`]). Call holding no lock of the queue (a `pop` about to
    /// wait).
    pub(crate) fn ensure_flush_task(&self) {
        let mut timer = lock(&self.timer);
        if timer.closed || timer.task.running() {
            return;
        }
        if !timer.runtime_gone {
            self.start_task(&mut timer);
        }
        if timer.runtime_gone {
            drop(timer);
            self.flush_without_timer();
        }
    }

    /// Tells the timer task what a change did to the deadlines. `earlier`: the earliest
    /// deadline may have moved earlier, so the task wakes to set its timer again (a later one
    /// needs nothing: the timer rings early, finds nothing due and sets the next). `start`: an
    /// item went where only a timed move takes it out, so the task starts if it does not run.
    /// Takes only the timer's lock, the innermost: callable under `main`.
    pub(crate) fn poke_timer(&self, earlier: bool, start: bool) {
        let mut timer = lock(&self.timer);
        if earlier {
            timer.dirty = true;
            if let Some(waker) = timer.waker.take() {
                waker.wake();
                return;
            }
        }
        if start && !timer.closed && !timer.runtime_gone && !timer.task.running() {
            self.start_task(&mut timer);
        }
    }

    /// Starts the timer task on the queue's runtime; marks the runtime gone if it is shutting
    /// down. The task sets its timer at its first poll.
    fn start_task(&self, timer: &mut FlushTimer) {
        let Some(runtime) = self.clock.runtime() else {
            trace!("no tokio runtime here: the timer task starts at the next call inside one");
            return;
        };
        timer.sleep = None;
        timer.armed = None;
        timer.dirty = true;
        timer.waker = None;
        if !start_timer_task(&mut timer.task, runtime, self.me.clone()) {
            debug!("the queue's runtime has shut down: timed moves happen when a pop looks");
            timer.runtime_gone = true;
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

    pub(crate) fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        let mut main = lock(&self.main);
        if !self.rules.any_leftover_due(&main, now) {
            // Nothing due: the deadline was early (its item left); set the next one.
            self.rules.refresh_next_leftover(&mut main);
            return 0;
        }
        let event = ClusterEvent::UNSCHEDULABLE_TIMEOUT;
        self.move_with(
            &mut main,
            &event,
            &EventPayload::none(),
            now,
            |main, sink| self.rules.move_leftover(main, now, sink),
        )
    }

    fn flush_due(&self, now: Instant) {
        self.flush_backoff_completed(now);
        if lock(&self.main)
            .next_leftover()
            .is_some_and(|next| next <= now)
        {
            self.flush_unschedulable_leftover(now);
        }
    }

    /// The moves a queue makes with no timer left (its runtime shut down), when the runtime
    /// goes and then at each `pop` that would wait: every item in backoff goes to active now,
    /// and the unschedulable items past their leftover deadline move; the others wait for an
    /// event, or for the next `pop` that looks.
    fn flush_without_timer(&self) {
        let now = self.clock.now();
        let moved = self.rules.flush_backoff_all(&mut lock(&self.hot), now);
        if moved > 0 {
            trace!(moved, "backoff ended: no timer left");
            crate::count::wake();
            self.pop_wake.notify_waiters();
        }
        self.flush_due(now);
    }
}

/// The timer task ([`start_timer_task`]): one sleep until the earliest deadline.
impl<K, T, C> Timed for LockedScheduling<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    /// Only this task sets the timer, so two settings never cross: a change of the earliest
    /// deadline pokes it (`dirty`), and it reads the deadline holding no lock of the timer.
    fn poll_timers(&self, cx: &mut Context<'_>) {
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
                // `cx` is woken when the timer rings, or by a poke.
                return;
            }
            if rang {
                self.flush_due(Instant::now());
            }
            let next = self.next_deadline();
            self.set_timer(&mut lock(&self.timer), next);
        }
    }

    fn timers_gone(&self) {
        let closed = {
            let mut timer = lock(&self.timer);
            timer.runtime_gone = true;
            timer.armed = None;
            timer.waker = None;
            timer.sleep = None;
            timer.closed
        };
        if !closed {
            debug!("the queue's runtime shut down: timed moves happen at once");
            self.flush_without_timer();
        }
    }
}
