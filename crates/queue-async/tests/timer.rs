//! The timer of the work and priority queues: deadlines kept exactly, an earlier one waking
//! the task, keys due together added in order and a chunk at a time, the gauges' refresh, and
//! the task's end with the last handle and at shutdown (paused time).

mod support;

use std::time::Duration;

use ctrlq_queue_async::metrics::UNFINISHED_WORK_UPDATE_PERIOD;
use ctrlq_queue_async::metrics::testing::RecordingProvider;
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{PriorityQueue, WorkQueue};
use support::{bounded, let_run};
use tokio::time::Instant;

/// The keys the timer's task adds at one poll before it lets the getters in (`CHUNK` in
/// `shared/waiting.rs`).
const CHUNK: usize = 32;

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

/// Keys due at once beyond a chunk are all added with no more time passing.
#[tokio::test(start_paused = true)]
async fn keys_due_beyond_a_chunk_follow_without_waiting_for_time() {
    let queue = WorkQueue::new();
    let n = 3 * CHUNK as u64 + 5;
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
