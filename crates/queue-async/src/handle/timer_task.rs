//! The timer task and the waiting keys it serves. Each waiting key has its exact deadline, in a
//! keyed heap of the keys by their wait (deadline, priority, order of add), the order in which
//! keys due together are added; one `tokio::time::Sleep` is set at the earliest deadline.
//!
//! The heap lives under the queue's lock; only the timer task sets the sleep. A
//! delayed add whose deadline is earlier than the one the sleep is set to wakes the task, which
//! sets the sleep again; a later deadline, a cancelled wait or a moved one needs no wake-up (the
//! sleep rings early, finds nothing due, and is set to the next deadline). The timer task (on
//! the crate's task lifecycle, see [`crate::runtime`]) is one loop: each time it is woken, it adds
//! the keys whose deadline is at or before the clock's now, in deadline order, sets the sleep
//! to the next deadline, and with metrics refreshes the unfinished-work gauges every
//! [`UNFINISHED_WORK_UPDATE_PERIOD`].
//!
//! When many keys are due at once (a busy second of delayed adds has ~100 per millisecond), the
//! task adds them [`CHUNK`] at a time, waking the getters and letting go of the lock after each
//! chunk, and wakes itself for the rest: the first keys are handed out while the later ones are
//! still being added, instead of every key of the tick waiting for the last one to be added.
//! Keys due at the same instant are always added in one chunk, so their order among themselves
//! (priority, then order of add) is the order they are handed out in.
//!
//! The deadlines are the keys' own, not rounded to a grid of this queue's: tokio's timer rounds
//! the sleep up to its millisecond tick, and the task takes by the clock what is due when it
//! wakes, so a key is as late as tokio's timer alone makes it.

use std::cmp::Reverse;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use ctrlq_queue_core::KeyedHeap;
use tokio::runtime;
use tokio::time::{Instant, MissedTickBehavior, Sleep};
use tracing::debug;

use super::{Handle, QueueKey, State, Wake};
use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;
use crate::runtime::Timed;

/// The keys the timer task adds at one poll, at the least: it adds at most this many, and then
/// every key due at the same instant as the last of them (keys due together are added
/// together), wakes the getters and is polled again for the rest.
const CHUNK: usize = 32;

/// The waiting keys, their deadlines and the one sleep until the earliest.
pub(super) struct Timers<K> {
    /// Every waiting key with its wait, in the order they are due.
    waiting: KeyedHeap<K, Wait>,
    /// The sleep until the earliest deadline the timer task has seen: made by the task, in the
    /// queue's runtime, at the first deadline it sets, and reset from then on; dropped when no
    /// key waits (an idle queue holds no timer, so paused time does not stop on it).
    sleep: Option<Pin<Box<Sleep>>>,
    /// The timer task's waker, taken by the add that sets an earlier deadline than the sleep's.
    waker: Option<Waker>,
    /// Numbers the delayed adds: the order that breaks ties between keys due at the same
    /// instant with the same priority (see [`Machine::has_priority`](super::Machine::has_priority)).
    seq: u64,
    ties_by_add_counter: bool,
}

/// One key's wait: its deadline, then its priority (higher first), then the number of the
/// delayed add that orders it among the keys due with it. Every key's number is its own, so
/// the order of the waiting keys is total.
type Wait = (Instant, Reverse<i32>, u64);

impl<K: Hash + Eq + Clone> Timers<K> {
    pub(super) fn new(ties_by_add_counter: bool) -> Self {
        Timers {
            waiting: KeyedHeap::default(),
            sleep: None,
            waker: None,
            seq: 0,
            ties_by_add_counter,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Makes `key` wait until `at`, keeping an earlier deadline it already has and the higher of
    /// the two priorities; wakes the timer task if `at` is earlier than its sleep.
    pub(super) fn wait_until(&mut self, key: K, priority: i32, at: Instant) {
        self.seq += 1;
        let (seq, ties_by_add_counter) = (self.seq, self.ties_by_add_counter);
        let mut moved = true;
        let waits = self
            .waiting
            .update(&key, |(w_at, Reverse(w_priority), w_seq)| {
                let raised = priority > *w_priority;
                moved = at < *w_at;
                if raised {
                    *w_priority = priority;
                }
                if moved {
                    *w_at = at;
                }
                if (ties_by_add_counter && raised) || (!ties_by_add_counter && moved) {
                    *w_seq = seq;
                }
            });
        if !waits {
            self.waiting.add(key, (at, Reverse(priority), seq));
        }
        if moved {
            self.poke(at);
        }
    }

    /// Wakes the timer task if `at` is earlier than the deadline its sleep is set to.
    fn poke(&mut self, at: Instant) {
        if self
            .sleep
            .as_ref()
            .is_none_or(|sleep| at < sleep.deadline())
            && let Some(waker) = self.waker.take()
        {
            waker.wake();
        }
    }

    /// Ends `key`'s wait if it has one; returns the higher of its waiting priority and
    /// `priority`.
    #[inline(always)]
    pub(super) fn end_wait(&mut self, key: &K, priority: i32) -> i32 {
        if self.waiting.is_empty() {
            // Every add now asks: no key is hashed while none waits.
            return priority;
        }
        self.cancel(key)
            .map_or(priority, |waited| priority.max(waited))
    }

    /// Ends `key`'s wait, if it waits, and returns its priority. The sleep is left as it is (it
    /// rings early, finds nothing due and is set to the next deadline), or dropped if no key
    /// waits any more.
    fn cancel(&mut self, key: &K) -> Option<i32> {
        let (_, (_, Reverse(priority), _)) = self.waiting.delete(key)?;
        if self.waiting.is_empty() {
            self.sleep = None;
        }
        Some(priority)
    }

    /// Takes the keys whose deadline is at or before now, ordered by deadline, then higher
    /// priority, then the order of their delayed adds: a chunk of them (see [`CHUNK`]), waking
    /// `cx` at once if more are due; else all of them, setting the sleep to the next deadline,
    /// where `cx` is woken, or by an add that sets an earlier one. Call from the timer task.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Vec<(K, i32)> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        let (due, more) = self.take_due(Some(Instant::now()), CHUNK);
        if more {
            cx.waker().wake_by_ref();
            return due;
        }
        let Some((_, &(next, ..))) = self.waiting.peek() else {
            return due;
        };
        // The task runs in the queue's runtime: the sleep belongs to it.
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
        if sleep.deadline() != next {
            sleep.as_mut().reset(next);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            // The next deadline passed since the clock was read: take it at the next poll.
            cx.waker().wake_by_ref();
        }
        due
    }

    /// Takes the keys whose deadline is at or before `now` (every key, with `None`), in the
    /// order of [`poll_due`](Self::poll_due), whether or not the sleep has rung: `limit` of
    /// them and then those due at the same instant as the last one taken, and whether more are
    /// due. The sleep is dropped if no key waits any more.
    fn take_due(&mut self, now: Option<Instant>, limit: usize) -> (Vec<(K, i32)>, bool) {
        let mut due = Vec::new();
        let mut last = None;
        let mut more = false;
        while let Some((_, &(at, ..))) = self.waiting.peek() {
            if now.is_some_and(|now| at > now) {
                break;
            }
            if due.len() >= limit && last != Some(at) {
                more = true;
                break;
            }
            let Some((key, (_, Reverse(priority), _))) = self.waiting.pop() else {
                break;
            };
            due.push((key, priority));
            last = Some(at);
        }
        if self.waiting.is_empty() {
            self.sleep = None;
        }
        (due, more)
    }

    /// Drops every waiting key and the sleep, and wakes the timer task, which ends (the queue
    /// shuts down).
    pub(super) fn clear(&mut self) {
        self.waiting = KeyedHeap::default();
        self.sleep = None;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The last handle is gone: the timer task is woken and ends.
impl<K> Drop for Timers<K> {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

// ===== the timer task =====

impl<K: QueueKey + 'static> Handle<K> {
    /// Has the timer task start on the queue's runtime (binding the queue to the calling one
    /// if it has none yet) once the lock is released, if it does not run; returns that
    /// runtime: `None` with no runtime to run it, or after shutdown.
    pub(super) fn ensure_timer_task<'a>(
        &'a self,
        state: &mut State<K>,
        wake: &mut Wake,
    ) -> Option<&'a runtime::Handle> {
        let runtime = self.clock.runtime()?;
        if !state.task {
            if self.is_shutting_down() {
                return None;
            }
            state.task = true;
            wake.start_task = true;
        }
        Some(runtime)
    }

    /// Adds keys whose wait is over, in the given order, under the lock.
    fn add_due(&self, state: &mut State<K>, due: Vec<(K, i32)>, wake: &mut Wake) {
        if due.is_empty() {
            return;
        }
        let n = due.len();
        for (key, priority) in due {
            // Refused only after a shutdown, which drops the waiting keys first: never here.
            let _ = self.add_locked(state, key, priority, false, wake);
        }
        debug!(queue = %self.name, due = n, "delays over");
    }

    /// Adds every waiting key whose deadline is at or before now (test helper).
    #[cfg(feature = "test-util")]
    pub(crate) fn settle(&self) {
        self.with_lock(|state, wake| {
            let Some(runtime) = self.clock.runtime().filter(|_| state.task) else {
                return;
            };
            let due = {
                let _runtime = runtime.enter();
                state.timers.take_due(Some(Instant::now()), usize::MAX).0
            };
            self.add_due(state, due, wake);
        });
    }
}

/// The timer task's loop ([`spawn_timer_task`](crate::runtime::spawn_timer_task) polls it each time `cx` is woken).
impl<K: QueueKey + 'static> Timed for Handle<K> {
    /// Adds the waiting keys whose deadline has passed, in deadline order, a chunk at a time
    /// (see [`CHUNK`]), and with metrics refreshes the gauges when their period is over; `cx`
    /// is woken at once while keys are due, else at the next deadline or tick.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.with_lock(|state, wake| {
            if self.is_shutting_down() {
                return Poll::Ready(());
            }
            let due = state.timers.poll_due(cx);
            self.add_due(state, due, wake);
            if state.refresh.is_none() && state.recorder.is_some() {
                let first = Instant::now() + UNFINISHED_WORK_UPDATE_PERIOD;
                let mut tick = tokio::time::interval_at(first, UNFINISHED_WORK_UPDATE_PERIOD);
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                state.refresh = Some(tick);
            }
            let mut refresh = false;
            if let Some(tick) = &mut state.refresh {
                // Polled until pending, so that `cx` is woken at the next tick.
                while tick.poll_tick(cx).is_ready() {
                    refresh = true;
                }
            }
            if refresh && let Some(recorder) = &state.recorder {
                recorder.update_unfinished_work(&self.clock);
            }
            Poll::Pending
        })
    }

    /// The task ended: every waiting key is added now, in deadline order, rather than left
    /// waiting for a sleep that will never ring (after a shutdown none waits). If the queue's
    /// runtime shut down, so does every later delayed add, whose task that runtime drops at once.
    fn task_ended(&self) {
        self.with_lock(|state, wake| {
            state.task = false;
            state.refresh = None;
            let due = state.timers.take_due(None, usize::MAX).0;
            if !due.is_empty() {
                debug!(queue = %self.name, waiting = due.len(), "the timer task ended: waits end now");
            }
            self.add_due(state, due, wake);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD;
    use crate::metrics::testing::RecordingProvider;
    use crate::priority::AddOptions;
    use crate::{PriorityQueue, WorkQueue};

    /// `fut`'s output within an hour of paused time, far beyond any delay here: a bug fails the
    /// test instead of hanging it.
    async fn bounded<F: std::future::Future>(fut: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(3600), fut)
            .await
            .expect("done within the bound")
    }

    /// Lets the timer task run until it sleeps.
    async fn let_run() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauges_are_first_refreshed_a_period_after_the_task_starts() {
        let provider = std::sync::Arc::new(RecordingProvider::default());
        let queue = WorkQueue::builder()
            .name("gauges")
            .metrics(provider.clone())
            .build();
        queue.add("a").unwrap();
        let item = bounded(queue.get()).await.unwrap();
        // The task, started by the add, runs for the first time 100 ms later.
        tokio::time::advance(Duration::from_millis(100)).await;
        let_run().await;
        assert_eq!(
            provider.recorded().unfinished_work_seconds,
            0.0,
            "no refresh before a period has passed"
        );
        tokio::time::sleep(UNFINISHED_WORK_UPDATE_PERIOD).await;
        let_run().await;
        let unfinished = provider.recorded().unfinished_work_seconds;
        assert!(
            unfinished >= 0.6,
            "refreshed once a period passed: {unfinished}"
        );
        drop(item);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_wakes_the_task_sleeping_until_a_later_one() {
        let queue = WorkQueue::new();
        let start = Instant::now();
        queue.add_after("late", Duration::from_secs(1)).unwrap();
        let_run().await;
        queue.add_after("early", Duration::from_millis(50)).unwrap();
        let item = bounded(queue.get()).await.unwrap();
        assert_eq!(
            (*item, start.elapsed()),
            ("early", Duration::from_millis(50))
        );
        item.done();
        let item = bounded(queue.get()).await.unwrap();
        assert_eq!((*item, start.elapsed()), ("late", Duration::from_secs(1)));
    }

    /// The deadline is the key's own: no grid of the queue's rounds it, only tokio's timer
    /// rounds its sleep up to the next millisecond tick.
    #[tokio::test(start_paused = true)]
    async fn a_key_is_added_within_tokio_s_tick_of_its_deadline() {
        let queue = WorkQueue::new();
        // The queue's first delayed add, 0.3 ms into a millisecond of the runtime's timer.
        tokio::time::advance(Duration::from_micros(300)).await;
        let deadline = Instant::now() + Duration::from_micros(1200);
        queue.add_after("a", Duration::from_micros(1200)).unwrap();
        let item = bounded(queue.get()).await.unwrap();
        let late = Instant::now() - deadline;
        assert!(late < Duration::from_millis(1), "{late:?} late");
        assert_eq!(*item, "a");
    }

    #[test]
    fn many_due_keys_come_a_chunk_at_a_time_and_keys_due_together_stay_together() {
        let mut timers = super::Timers::new(false);
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        // A chunk and 4 more keys due one after another, then 25 due at one instant.
        let spread = super::CHUNK as u64 + 4;
        for i in 0..spread {
            timers.wait_until(i, 0, ms(i + 1));
        }
        for i in spread..spread + 25 {
            timers.wait_until(i, 0, ms(spread + 1));
        }
        let (first, more) = timers.take_due(Some(ms(1000)), super::CHUNK);
        assert_eq!(first.len(), super::CHUNK);
        assert!(more, "more keys are due");
        // The next chunk reaches into the keys due together and takes all of them.
        let (second, more) = timers.take_due(Some(ms(1000)), super::CHUNK);
        assert_eq!(second.len(), 4 + 25);
        assert!(!more, "nothing more is due");
        let order: Vec<u64> = first.into_iter().chain(second).map(|(k, _)| k).collect();
        assert_eq!(order, (0..spread + 25).collect::<Vec<_>>());
        assert_eq!(timers.len(), 0);
        // Only what is due: nothing before the first deadline, then that key alone.
        timers.wait_until(50, 0, ms(2000));
        timers.wait_until(51, 0, ms(3000));
        assert_eq!(timers.take_due(Some(ms(1999)), 1), (vec![], false));
        assert_eq!(timers.take_due(Some(ms(2500)), 1), (vec![(50, 0)], false));
    }

    /// Keys due at once beyond a chunk are all added with no more time passing.
    #[tokio::test(start_paused = true)]
    async fn keys_due_beyond_a_chunk_follow_without_waiting_for_time() {
        let queue = WorkQueue::new();
        let n = 3 * super::CHUNK as u64 + 5;
        for i in 0..n {
            queue
                .add_after(i, Duration::from_micros(10 * (i + 1)))
                .unwrap();
        }
        let_run().await;
        tokio::time::advance(Duration::from_millis(5)).await;
        let at = Instant::now();
        for want in 0..n {
            let item = tokio::time::timeout(Duration::from_secs(1), queue.get())
                .await
                .expect("every due key is added")
                .unwrap();
            assert_eq!(*item, want);
            item.done();
        }
        assert_eq!(Instant::now(), at, "no time passed");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_due_at_one_wake_up_come_in_deadline_then_add_order() {
        let queue = WorkQueue::new();
        for (key, at) in [("late", 20), ("x", 10), ("y", 10), ("first", 5)] {
            queue.add_after(key, Duration::from_millis(at)).unwrap();
        }
        let_run().await;
        tokio::time::advance(Duration::from_millis(30)).await;
        let_run().await;
        assert_eq!(queue.len(), 4, "added at one wake-up");
        let mut order = Vec::new();
        for _ in 0..4 {
            let item = bounded(queue.get()).await.unwrap();
            order.push(*item);
            item.done();
        }
        assert_eq!(order, ["first", "x", "y", "late"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_moved_earlier_wakes_the_task_and_a_later_one_never_delays_it() {
        let queue = PriorityQueue::new();
        let start = Instant::now();
        let after = |ms| AddOptions::default().after(Duration::from_millis(ms));
        queue.add_with("a", after(1000)).unwrap();
        queue.add_with("b", after(40)).unwrap();
        let_run().await;
        queue.add_with("a", after(30)).unwrap();
        queue.add_with("b", after(2000).priority(1)).unwrap();
        for (key, at) in [("a", 30), ("b", 40)] {
            let item = bounded(queue.get()).await.unwrap();
            assert_eq!((*item, start.elapsed()), (key, Duration::from_millis(at)));
            item.done();
        }
        assert_eq!(queue.waiting_len(), 0);
    }

    /// A priority queue's keys due together at one priority come in the order of their first
    /// delayed add: adding a waiting key again at the same priority and deadline keeps its place.
    #[tokio::test(start_paused = true)]
    async fn a_same_priority_re_add_keeps_a_waiting_keys_place() {
        let queue = PriorityQueue::new();
        let after = AddOptions::default().after(Duration::from_millis(10));
        queue.add_with("x", after).unwrap();
        queue.add_with("y", after).unwrap();
        queue.add_with("x", after).unwrap();
        let mut order = Vec::new();
        for _ in 0..2 {
            let item = bounded(queue.get()).await.unwrap();
            order.push(*item);
            item.done();
        }
        assert_eq!(order, ["x", "y"]);
    }

    /// Hands out every key of `queue`, done at once, in order.
    async fn order_of_work(queue: &WorkQueue<&'static str>, n: usize) -> Vec<&'static str> {
        let mut order = Vec::new();
        for _ in 0..n {
            let item = bounded(queue.get()).await.unwrap();
            order.push(*item);
            item.done();
        }
        order
    }

    /// In a work queue, a key due with others comes in the order of its delayed adds: one added
    /// again for the same deadline keeps its place, one whose wait moved earlier counts as added
    /// then, after the keys already waiting for that instant.
    #[tokio::test(start_paused = true)]
    async fn a_work_queue_orders_keys_due_together_by_their_last_effective_add() {
        let queue = WorkQueue::new();
        let ms = Duration::from_millis;
        queue.add_after("x", ms(10)).unwrap();
        queue.add_after("y", ms(10)).unwrap();
        queue.add_after("x", ms(10)).unwrap();
        assert_eq!(order_of_work(&queue, 2).await, ["x", "y"]);

        queue.add_after("x", ms(20)).unwrap();
        queue.add_after("y", ms(10)).unwrap();
        queue.add_after("x", ms(10)).unwrap();
        assert_eq!(order_of_work(&queue, 2).await, ["y", "x"]);
    }

    /// In a priority queue, a key due with others at its priority keeps the order of its first
    /// delayed add when its wait moves earlier, and goes after them when its priority rises to
    /// theirs.
    #[tokio::test(start_paused = true)]
    async fn a_priority_queue_orders_keys_due_together_by_their_add_at_that_priority() {
        let queue = PriorityQueue::new();
        let at = |ms| AddOptions::default().after(Duration::from_millis(ms));
        let order = async |queue: &PriorityQueue<&'static str>| {
            let mut order = Vec::new();
            for _ in 0..2 {
                let item = bounded(queue.get()).await.unwrap();
                order.push(*item);
                item.done();
            }
            order
        };
        queue.add_with("x", at(20)).unwrap();
        queue.add_with("y", at(10)).unwrap();
        queue.add_with("x", at(10)).unwrap();
        assert_eq!(order(&queue).await, ["x", "y"]);

        queue.add_with("y", at(10).priority(1)).unwrap();
        queue.add_with("x", at(10)).unwrap();
        queue.add_with("x", at(10).priority(1)).unwrap();
        assert_eq!(order(&queue).await, ["y", "x"]);
    }

    /// A shut-down queue drops its waiting keys: none waits, and none is added when its
    /// deadline passes.
    #[tokio::test(start_paused = true)]
    async fn the_timer_task_ends_when_the_last_handle_is_dropped() {
        let runtime = tokio::runtime::Handle::current();
        let queue: WorkQueue<&str> = WorkQueue::new();
        queue.add_after("a", Duration::from_secs(60)).unwrap();
        let_run().await;
        assert_eq!(
            runtime.metrics().num_alive_tasks(),
            1,
            "the timer task runs"
        );
        drop(queue);
        let_run().await;
        assert_eq!(
            runtime.metrics().num_alive_tasks(),
            0,
            "woken by the drop, it ended before its sleep would have rung"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutting_down_drops_the_waiting_keys() {
        let queue = WorkQueue::new();
        queue.add_after("a", Duration::from_millis(10)).unwrap();
        let_run().await;
        assert_eq!(queue.waiting_len(), 1);
        queue.shut_down();
        assert_eq!(queue.waiting_len(), 0);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let_run().await;
        assert_eq!(queue.len(), 0);
    }

    /// The queue's runtime shut down while keys wait: their waits end at once, and they are
    /// added in deadline order.
    #[test]
    fn waiting_keys_are_added_when_the_queue_s_runtime_shuts_down() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime")
        };
        let queue = WorkQueue::new();
        runtime().block_on(async {
            queue.add_after("late", Duration::from_secs(2)).unwrap();
            queue.add_after("early", Duration::from_secs(1)).unwrap();
            let_run().await;
            assert_eq!(queue.waiting_len(), 2);
        });
        assert_eq!(queue.waiting_len(), 0, "the waits ended");
        assert_eq!(queue.len(), 2);
        let order = runtime().block_on(async {
            let mut order = Vec::new();
            for _ in 0..2 {
                let item = bounded(queue.get()).await.unwrap();
                order.push(*item);
                item.done();
            }
            order
        });
        assert_eq!(order, ["early", "late"]);
    }
}
