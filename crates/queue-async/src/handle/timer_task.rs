//! The timer task and the waiting keys it serves. Each waiting key has its own timer in one
//! `tokio_util::time::DelayQueue`, and a map from key to its wait (deadline, priority and the
//! `DelayQueue` key of its timer), as kube-runtime's `scheduler.rs`.
//!
//! The map and the timers live under the queue's lock: a delayed add sets its timer directly,
//! and `DelayQueue` wakes the timer task when that timer is earlier than the one it sleeps on.
//! The timer task (on the crate's task lifecycle, see [`crate::task`]) is one loop: each time
//! it is woken, it adds the keys whose timer rang, in deadline order, and with metrics
//! refreshes the unfinished-work gauges every
//! [`UNFINISHED_WORK_UPDATE_PERIOD`](crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD).

use std::cmp::Reverse;
use std::hash::Hash;
use std::task::{Context, Poll};

use hashbrown::HashMap;
use tokio::runtime;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::time::{DelayQueue, delay_queue};
use tracing::debug;

use super::{Core, Handle, QueueKey, State, Wake};
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;
use crate::task::{Timed, start_timer_task};

/// The waiting keys and their timers.
pub(super) struct Timers<K> {
    waiting: HashMap<K, Waiting>,
    /// One timer per waiting key. Its `Sleep` belongs to the timer task's runtime: every call
    /// that may set it runs inside that runtime's context.
    timers: DelayQueue<K>,
    /// The order of delayed adds, to break ties between keys due at the same instant with the
    /// same priority (see [`Core::TIES_BY_ADD_COUNTER`]).
    seq: u64,
    ties_by_add_counter: bool,
}

/// One key's wait.
struct Waiting {
    at: Instant,
    priority: i32,
    seq: u64,
    timer: delay_queue::Key,
}

/// A due key with what orders it among the keys due with it.
type Due<K> = (Instant, Reverse<i32>, u64, K);

impl<K: Hash + Eq + Clone> Timers<K> {
    pub(super) fn new(ties_by_add_counter: bool) -> Self {
        Timers {
            waiting: HashMap::new(),
            timers: DelayQueue::new(),
            seq: 0,
            ties_by_add_counter,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Makes `key` wait until `at`, keeping an earlier deadline it already has and the higher of
    /// the two priorities. Call inside the timer task's runtime.
    pub(super) fn wait_until(&mut self, key: K, priority: i32, at: Instant) {
        self.seq += 1;
        if let Some(w) = self.waiting.get_mut(&key) {
            let (raised, moved) = (priority > w.priority, at < w.at);
            if raised {
                w.priority = priority;
            }
            if moved {
                w.at = at;
                self.timers.reset_at(&w.timer, at);
            }
            if (self.ties_by_add_counter && raised) || (!self.ties_by_add_counter && moved) {
                w.seq = self.seq;
            }
            return;
        }
        let timer = self.timers.insert_at(key.clone(), at);
        let seq = self.seq;
        let w = Waiting {
            at,
            priority,
            seq,
            timer,
        };
        self.waiting.insert(key, w);
    }

    /// Ends `key`'s wait, if it waits, and returns its priority. Call inside the timer task's
    /// runtime (removing a timer may set the `DelayQueue`'s sleep anew).
    pub(super) fn cancel(&mut self, key: &K) -> Option<i32> {
        let w = self.waiting.remove(key)?;
        self.timers.remove(&w.timer);
        Some(w.priority)
    }

    /// Takes every key whose timer rang, ordered by deadline, then higher priority, then the
    /// order of their delayed adds; `cx` is woken at the next timer (or when an add sets an
    /// earlier one). Call from the timer task.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Vec<(K, i32)> {
        let mut due: Vec<Due<K>> = Vec::new();
        while let Poll::Ready(Some(expired)) = self.timers.poll_expired(cx) {
            let key = expired.into_inner();
            // Every timer belongs to a waiting key: `cancel` and `clear` remove both.
            if let Some(w) = self.waiting.remove(&key) {
                due.push((w.at, Reverse(w.priority), w.seq, key));
            }
        }
        sorted(due)
    }

    /// Takes every key whose deadline is at or before `now`, in the order of
    /// [`poll_due`](Self::poll_due), whether or not its timer has rung. Call inside the timer
    /// task's runtime.
    #[cfg(feature = "test-util")]
    fn take_due(&mut self, now: Instant) -> Vec<(K, i32)> {
        let keys: Vec<K> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut due = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(w) = self.waiting.remove(&key) {
                self.timers.remove(&w.timer);
                due.push((w.at, Reverse(w.priority), w.seq, key));
            }
        }
        sorted(due)
    }

    /// Starts the timers on the calling runtime's clock: a `DelayQueue` measures its deadlines
    /// from the instant it was made, which must be read from the runtime that times them (a
    /// queue built on a plain thread would otherwise start from the real clock). Call inside
    /// the timer task's runtime before the first key waits.
    fn start_here(&mut self) {
        debug_assert!(
            self.waiting.is_empty(),
            "no key waits before the timer task runs"
        );
        self.timers = DelayQueue::new();
    }

    /// Takes every waiting key, ordered as [`poll_due`](Self::poll_due) orders the keys due
    /// together, and drops their timers (their runtime is gone).
    fn take_all(&mut self) -> Vec<(K, i32)> {
        let due = self
            .waiting
            .drain()
            .map(|(key, w)| (w.at, Reverse(w.priority), w.seq, key))
            .collect();
        self.timers = DelayQueue::new();
        sorted(due)
    }

    /// Drops every waiting key and its timer.
    pub(super) fn clear(&mut self) {
        self.waiting = HashMap::new();
        self.timers = DelayQueue::new();
    }
}

fn sorted<K>(mut due: Vec<Due<K>>) -> Vec<(K, i32)> {
    due.sort_unstable_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    due.into_iter()
        .map(|(_, Reverse(p), _, k)| (k, p))
        .collect()
}

// ===== the timer task =====

impl<K: QueueKey + 'static, M: Core<K>> Handle<K, M> {
    /// Starts the timer task on the queue's runtime if it does not run (binding the queue to
    /// the calling one if it has none yet), and returns that runtime while the task runs: `None`
    /// with no runtime to run it, after shutdown, or once the queue's runtime has shut down
    /// (then no task starts again).
    pub(super) fn ensure_timer_task<'a>(
        &'a self,
        state: &mut State<K, M>,
    ) -> Option<&'a runtime::Handle> {
        let runtime = self.clock.runtime()?;
        if state.task.running() {
            return Some(runtime);
        }
        if state.runtime_gone || state.machine.is_shut_down() {
            return None;
        }
        {
            let _runtime = runtime.enter();
            state.timers.start_here();
            state.refresh = self.metrics.then(|| {
                let first = Instant::now() + UNFINISHED_WORK_UPDATE_PERIOD;
                let mut tick = tokio::time::interval_at(first, UNFINISHED_WORK_UPDATE_PERIOD);
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                tick
            });
        }
        if start_timer_task(&mut state.task, runtime, self.me.clone()) {
            Some(runtime)
        } else {
            debug!(queue = %self.name, "the queue's runtime has shut down: delays end at once");
            state.runtime_gone = true;
            state.refresh = None;
            None
        }
    }

    /// Adds keys whose wait is over, in the given order, under the lock.
    fn add_due(&self, state: &mut State<K, M>, due: Vec<(K, i32)>, wake: &mut Wake) {
        if due.is_empty() {
            return;
        }
        let n = due.len();
        for (key, priority) in due {
            // Refused only after a shutdown, which drops the waiting keys first: never here.
            let _ = self.add_unwaited(state, key, priority, wake);
        }
        debug!(queue = %self.name, due = n, "delays over");
    }

    /// Adds every waiting key whose deadline is at or before now (test helper).
    #[cfg(feature = "test-util")]
    pub(crate) fn settle(&self) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            let Some(runtime) = self.clock.runtime().filter(|_| state.task.running()) else {
                return;
            };
            let due = {
                let _runtime = runtime.enter();
                state.timers.take_due(Instant::now())
            };
            self.add_due(&mut state, due, &mut wake);
        }
        self.wake(wake);
    }
}

/// The timer task's loop ([`start_timer_task`] polls it each time `cx` is woken).
impl<K: QueueKey + 'static, M: Core<K>> Timed for Handle<K, M> {
    /// Adds every waiting key whose timer rang, in deadline order, and refreshes the gauges
    /// when their period is over; `cx` is woken at the next timer or tick.
    fn poll_timers(&self, cx: &mut Context<'_>) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            let due = state.timers.poll_due(cx);
            self.add_due(&mut state, due, &mut wake);
            let mut refresh = false;
            if let Some(tick) = &mut state.refresh {
                // Polled until pending, so that `cx` is woken at the next tick.
                while tick.poll_tick(cx).is_ready() {
                    refresh = true;
                }
            }
            if refresh {
                state.recorder.update_unfinished_work(&self.clock);
            }
        }
        self.wake(wake);
    }

    /// The queue's runtime shut down: every waiting key is added now, in deadline order,
    /// rather than left with timers that will never ring; later delayed adds are added at once.
    fn timers_gone(&self) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            state.runtime_gone = true;
            state.refresh = None;
            let due = state.timers.take_all();
            if !due.is_empty() {
                debug!(queue = %self.name, waiting = due.len(), "the queue's runtime shut down: waits end now");
            }
            self.add_due(&mut state, due, &mut wake);
        }
        self.wake(wake);
    }
}
