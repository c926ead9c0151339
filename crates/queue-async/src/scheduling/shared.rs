//! The state behind a [`SchedulingQueue`](super::SchedulingQueue): the state machine and its
//! [`Timer`] under one lock, the wake-ups of waiting pops, and the timer's task.
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
//! later looks before it waits), and tells the timer the earliest deadline, starting its task
//! where none runs.
//!
//! # The timer's task
//!
//! The timer's one sleep is at the earliest deadline (backoff expiry or unschedulable
//! leftover). Each time the task is woken, it makes the timed moves that are due by the clock
//! and sets the sleep to the next deadline (see [`Timer`]).

use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::sync::Weak;
use std::task::{Context, Poll};

use ctrlq_queue_core::Compare;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::trace;

use super::QueuedItem;
use super::machine::SchedulingState;
use crate::timer::{QueueClock, Timed, Timer};
use crate::wait::WAKES;

/// The shared state of a queue and its handles; see the module docs.
pub(crate) struct Shared<K, T, C> {
    /// The queue's one lock.
    state: Mutex<Locked<K, T, C>>,
    /// Woken (all waiters) when a change lets a pop take an item, and on shutdown.
    pub(crate) pop_wake: Notify,
    /// This state, for the timer's task, which must not keep it alive.
    me: Weak<Self>,
    /// Timestamps come from here: the caller's runtime clock, or the queue's from a plain thread.
    pub(crate) clock: QueueClock,
}

/// Guarded by [`Shared::state`].
pub(crate) struct Locked<K, T, C> {
    pub(crate) machine: SchedulingState<K, T, C>,
    /// Its task starts at the first deadline (on the queue's runtime, see the crate's
    /// [Time](crate#time)).
    timer: Timer,
}

/// The lock held for a change; its drop wakes what the change calls for (see the module docs).
pub(crate) struct Change<'a, K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> {
    shared: &'a Shared<K, T, C>,
    /// `Some` until the drop releases it.
    locked: Option<MutexGuard<'a, Locked<K, T, C>>>,
    /// Whether a pop could take an item before the change.
    could_pop: bool,
}

/// The bounds of a queue's key wherever the timer's task may start (it runs on the runtime and
/// reaches the state through a `Weak`): one name for the impls here.
pub(crate) trait TaskKey: Hash + Eq + Clone + Send + Sync + 'static {}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> TaskKey for K {}

/// The bounds of a queue's order wherever the timer's task may start.
pub(crate) trait TaskOrder<K, T>: Compare<QueuedItem<K, T>> + Send + Sync + 'static {}

impl<K, T, C: Compare<QueuedItem<K, T>> + Send + Sync + 'static> TaskOrder<K, T> for C {}

// ===== impl Shared =====

impl<K, T, C> Shared<K, T, C> {
    pub(crate) fn new(machine: SchedulingState<K, T, C>, me: Weak<Self>) -> Self {
        Shared {
            state: Mutex::new(Locked {
                machine,
                timer: Timer::default(),
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
        if let Some(guard) = self.state.try_lock() {
            return guard;
        }
        trace!(name: "contended_lock", target: WAKES, "the lock was held");
        self.state.lock()
    }

    pub(crate) fn shut_down(&self) {
        {
            let mut locked = self.lock();
            locked.machine.shut_down();
            // The timer's task, woken, ends.
            locked.timer.end();
        }
        self.wake_pops();
    }

    /// Wakes every waiting pop.
    fn wake_pops(&self) {
        trace!(name: "wake", target: WAKES, "the pops woken");
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

    /// Tells the timer the earliest deadline, starting its task where none runs (it sets its
    /// sleep at its first poll).
    fn arm(&self, locked: &mut Locked<K, T, C>) {
        let next = locked.machine.next_deadline();
        if next.is_some() && !locked.machine.closed && !locked.timer.start(&self.clock, &self.me) {
            trace!("no tokio runtime here: the timer's task starts at the next call inside one");
        }
        locked.timer.arm(next);
    }
}

/// The timer's task (see [`Timer`]).
impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Timed for Shared<K, T, C> {
    /// Makes the timed moves due by the clock and has the timer wake `cx` at the next
    /// deadline.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()> {
        let now = Instant::now();
        // The moves first, in a change of their own: the pops they let take an item are woken
        // before the sleep is set.
        self.change().machine.flush_due(now);
        let mut locked = self.lock();
        if locked.machine.closed {
            return Poll::Ready(());
        }
        let next = locked.machine.next_deadline();
        locked.timer.poll(cx, next, now);
        Poll::Pending
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
        self.shared.arm(&mut locked);
        drop(locked);
        if wake_pops {
            self.shared.wake_pops();
        }
    }
}
