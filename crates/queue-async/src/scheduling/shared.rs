//! The state behind a [`SchedulingQueue`](super::SchedulingQueue): the state machine and its
//! timer under one lock, the wake-ups of waiting pops, and the timer task.
//!
//! # The lock
//!
//! One lock (parking_lot, never held across an `.await`) guards the state machine and the
//! timer: every add, pop, hand-back, move and flush takes it, and nothing else is locked while
//! it is held. A move scans the unschedulable items under it, as kube-scheduler's
//! `PriorityQueue` holds its one lock around such scans, so a pop waits for the scan to end.
//! Hints and gates run under it, so they must not call back into the queue.
//!
//! Every change goes through [`Change`]. Its drop, after the change or while a hint or gate
//! panics midway, releases the lock, then wakes every waiting pop if the change let a pop take
//! an item where none could be taken before (a waiting pop found nothing; one that registers
//! later looks before it waits), and has the timer task look again if the earliest deadline is
//! now earlier than its timer.
//!
//! # The timer task
//!
//! One sleep until the earliest deadline (backoff expiry or unschedulable leftover), which only
//! the timer task sets (see [`crate::runtime`]). Each time it is woken, it makes the timed moves
//! that are due by the clock and sets the sleep to the next deadline; with none, it holds no
//! sleep, so under paused time the clock is free to jump. A change that moves the earliest
//! deadline earlier wakes it, or starts it where none runs; a later deadline needs nothing (the
//! sleep rings early, finds nothing due and is set again).

use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker};

use ctrlq_queue_core::Compare;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tracing::{debug, trace};

use super::QueuedItem;
use super::machine::SchedulingState;
use crate::runtime::{QueueClock, Timed, spawn_timer_task};

/// The shared state of a queue and its handles; see the module docs.
pub(crate) struct Shared<K, T, C> {
    /// The queue's one lock.
    state: Mutex<Locked<K, T, C>>,
    /// Woken (all waiters) when a change lets a pop take an item, and on shutdown.
    pub(crate) pop_wake: Notify,
    /// This state, for the timer task, which must not keep it alive.
    me: Weak<Self>,
    /// Timestamps come from here: the caller's runtime clock, or the queue's from a plain thread.
    pub(crate) clock: QueueClock,
}

/// Guarded by [`Shared::state`].
pub(crate) struct Locked<K, T, C> {
    pub(crate) machine: SchedulingState<K, T, C>,
    /// The timer task runs, or starts once the lock is released: started by the first
    /// deadline (on the queue's runtime, see the crate's [Time](crate#time)), it ends at
    /// shutdown and with this state when the last handle drops (see [`crate::runtime`]).
    task: bool,
    /// The sleep until the deadline the timer task set, made in the queue's runtime; `None`
    /// when none is set.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The timer task's waker, taken by a change that sets an earlier deadline than the sleep.
    waker: Option<Waker>,
}

/// The lock held for a change; its drop wakes what the change calls for (see the module docs).
pub(crate) struct Change<'a, K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> {
    shared: &'a Shared<K, T, C>,
    /// `Some` until the drop releases it.
    locked: Option<MutexGuard<'a, Locked<K, T, C>>>,
    /// Whether a pop could take an item before the change.
    could_pop: bool,
}

/// The bounds of a queue's key wherever the timer task may start (it runs on the runtime and
/// reaches the state through a `Weak`): one name for the impls here.
pub(crate) trait TaskKey: Hash + Eq + Clone + Send + Sync + 'static {}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> TaskKey for K {}

/// The bounds of a queue's order wherever the timer task may start.
pub(crate) trait TaskOrder<K, T>: Compare<QueuedItem<K, T>> + Send + Sync + 'static {}

impl<K, T, C: Compare<QueuedItem<K, T>> + Send + Sync + 'static> TaskOrder<K, T> for C {}

// ===== impl Shared =====

impl<K, T, C> Shared<K, T, C> {
    pub(crate) fn new(machine: SchedulingState<K, T, C>, me: Weak<Self>) -> Self {
        Shared {
            state: Mutex::new(Locked {
                machine,
                task: false,
                sleep: None,
                waker: None,
            }),
            pop_wake: Notify::new(),
            me,
            clock: QueueClock::new(),
        }
    }

    /// The lock, for a read, a pop, or a change that can neither let a pop take an item nor
    /// move a deadline earlier (parking_lot: no poisoning, so a panicking hint or gate cannot
    /// wedge the queue; the state is consistent between transitions, which is all a panic can
    /// leave).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked<K, T, C>> {
        // With the `wake-counts` feature, an acquisition that finds it held is counted.
        #[cfg(feature = "wake-counts")]
        {
            if let Some(guard) = self.state.try_lock() {
                return guard;
            }
            crate::wake_counts::contended_lock();
        }
        self.state.lock()
    }

    pub(crate) fn shut_down(&self) {
        {
            let mut locked = self.lock();
            locked.machine.shut_down();
            // The timer task, woken, ends.
            if let Some(waker) = locked.waker.take() {
                waker.wake();
            }
        }
        self.wake_pops();
    }

    /// Wakes every waiting pop.
    fn wake_pops(&self) {
        #[cfg(feature = "wake-counts")]
        crate::wake_counts::wake();
        self.pop_wake.notify_waiters();
    }
}

impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Shared<K, T, C> {
    /// The lock, for a change.
    pub(crate) fn change(&self) -> Change<'_, K, T, C> {
        let locked = self.lock();
        Change {
            shared: self,
            could_pop: locked.machine.can_pop(),
            locked: Some(locked),
        }
    }

    /// Has the timer task look at the earliest deadline if it is earlier than the timer: wakes
    /// the task, or returns `true` where none runs, to start it once the lock is released (it
    /// sets its sleep at its first poll).
    fn arm(&self, locked: &mut Locked<K, T, C>) -> bool {
        let Some(next) = locked.machine.next_deadline() else {
            return false;
        };
        if locked.sleep.as_ref().is_some_and(|s| s.deadline() <= next) {
            return false;
        }
        if let Some(waker) = locked.waker.take() {
            waker.wake();
            return false;
        }
        if locked.task || locked.machine.closed {
            return false;
        }
        if self.clock.runtime().is_none() {
            trace!("no tokio runtime here: the timer task starts at the next call inside one");
            return false;
        }
        locked.task = true;
        true
    }
}

/// The timer task ([`spawn_timer_task`]): one sleep until the earliest deadline.
impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Timed for Shared<K, T, C> {
    /// Makes the timed moves due by the clock and sets the sleep to the next deadline; `cx` is
    /// woken there, or by a change that sets an earlier one.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()> {
        // The moves first, in a change of their own: the pops they let take an item are woken
        // before the sleep is set.
        self.change().machine.flush_due(Instant::now());
        let mut locked = self.lock();
        if locked.machine.closed {
            return Poll::Ready(());
        }
        locked.waker = Some(cx.waker().clone());
        let Some(next) = locked.machine.next_deadline() else {
            locked.sleep = None;
            return Poll::Pending;
        };
        // The task runs in the queue's runtime: the sleep belongs to it.
        let sleep = locked
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            // The next deadline passed since the clock was read: its moves are made at the
            // next poll, which resets the sleep to the deadline after it.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// The task ended: the timed moves due now are made, since no timer rings for them any
    /// more. If the queue's runtime shut down, a later deadline spawns a task there again,
    /// which ends at once and makes the moves due then: at the next change or `pop` that looks.
    /// This change's drop does not arm, so the end of a task never spawns the next.
    fn task_ended(&self) {
        let mut locked = self.lock();
        locked.task = false;
        locked.waker = None;
        locked.sleep = None;
        if locked.machine.closed {
            return;
        }
        let could_pop = locked.machine.can_pop();
        debug!("the timer task ended: timed moves happen now");
        // So also at each change or `pop` that would start a task the runtime drops at once:
        // every item in backoff goes to active now, and the unschedulable items past their
        // leftover deadline move; the others wait for an event, or for the next change or
        // `pop` that looks.
        let now = self.clock.now();
        locked.machine.flush_backoff(None, now);
        locked.machine.flush_due(now);
        let wake_pops = !could_pop && locked.machine.can_pop();
        drop(locked);
        if wake_pops {
            self.wake_pops();
        }
    }
}

/// The last handle is gone: the timer task is woken and ends.
impl<K, T, C> Drop for Shared<K, T, C> {
    fn drop(&mut self) {
        if let Some(waker) = self.state.get_mut().waker.take() {
            waker.wake();
        }
    }
}

// ===== impl Change =====

impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Deref for Change<'_, K, T, C> {
    type Target = Locked<K, T, C>;

    fn deref(&self) -> &Locked<K, T, C> {
        self.locked.as_ref().expect("held until the drop")
    }
}

impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> DerefMut for Change<'_, K, T, C> {
    fn deref_mut(&mut self) -> &mut Locked<K, T, C> {
        self.locked.as_mut().expect("held until the drop")
    }
}

impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Drop for Change<'_, K, T, C> {
    fn drop(&mut self) {
        let Some(mut locked) = self.locked.take() else {
            return;
        };
        let wake_pops = !self.could_pop && locked.machine.can_pop();
        let start_task = self.shared.arm(&mut locked);
        drop(locked);
        if wake_pops {
            self.shared.wake_pops();
        }
        if start_task && let Some(runtime) = self.shared.clock.runtime() {
            spawn_timer_task(runtime, self.shared.me.clone());
        }
    }
}
