//! Defects found in the work queue's timing, wake-ups and guards, each pinned by a test: due
//! delayed keys in deadline order, a kept stream that does not hold a wake-up, a panicking
//! worker's key requeued.

mod support;

use std::future::Future;
use std::task::Context;
use std::time::Duration;

use ctrlq_queue_async::WorkQueue;
use futures::StreamExt;
use support::{BOUND, REAL_BOUND, bounded, soon};
use tokio::time::{Instant, advance, sleep, timeout};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Keys whose deadlines passed before the timer task ran come out by deadline, however far the
/// clock moved past them (client-go's delaying queue releases them from a heap by deadline).
#[tokio::test(start_paused = true)]
async fn due_keys_come_out_in_deadline_order_when_the_clock_moved_past_several() {
    let queue = WorkQueue::new();
    queue.add_after("warm-up", ms(1)).unwrap();
    timeout(BOUND, queue.get()).await.unwrap().unwrap().done();
    sleep(ms(5)).await;
    queue.add_after("late", ms(15)).unwrap();
    tokio::task::yield_now().await;
    queue.add_after("early", ms(1)).unwrap();
    advance(ms(20)).await;
    let mut order = Vec::new();
    for _ in 0..2 {
        order.push(
            timeout(BOUND, queue.get())
                .await
                .unwrap()
                .unwrap()
                .into_key(),
        );
    }
    assert_eq!(order, ["early", "late"]);
}

/// Many keys with distinct deadlines, added in a scrambled order, all overdue by the time the
/// timer task runs: released by deadline.
#[tokio::test(start_paused = true)]
async fn a_batch_of_overdue_keys_is_released_by_deadline() {
    let queue = WorkQueue::new();
    // Deadlines 1..=40 ms, added in a scrambled order (37 is coprime with 40).
    let delays: Vec<u64> = (0..40).map(|i| (i * 37) % 40 + 1).collect();
    for &d in &delays {
        queue.add_after(d, ms(d)).unwrap();
        if d % 3 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // Move past every deadline in one step: the timer task then finds all of them due.
    advance(ms(100)).await;
    let mut order = Vec::new();
    for _ in 0..delays.len() {
        order.push(
            timeout(BOUND, queue.get())
                .await
                .unwrap()
                .unwrap()
                .into_key(),
        );
    }
    let sorted: Vec<u64> = (1..=40).collect();
    assert_eq!(order, sorted);
}

/// A key is released at the first wake of the timer task after its deadline, not later, and
/// the paused clock goes straight to the deadline (no timers but the keys' own).
#[tokio::test(start_paused = true)]
async fn the_paused_clock_jumps_straight_to_each_deadline() {
    let queue = WorkQueue::new();
    let start = Instant::now();
    queue.add_after("a", ms(7)).unwrap();
    queue.add_after("b", ms(300)).unwrap();
    let a = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!((*a.key(), start.elapsed()), ("a", ms(7)));
    let b = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!((*b.key(), start.elapsed()), ("b", ms(300)));
}

/// A stream kept after its `next()` future was dropped must not hold a wake-up that another,
/// idle `get` needs: the add below must reach the `get`.
#[tokio::test(start_paused = true)]
async fn a_kept_stream_whose_next_was_cancelled_holds_no_wake_up() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    let mut stream = Box::pin(queue.stream());
    {
        // Poll `next()` once (it waits: the queue is empty), then drop it, keeping the stream.
        let mut next = stream.next();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut next).poll(&mut cx).is_pending());
    }
    let other = queue.clone();
    let getter = tokio::spawn(async move { other.get().await.map(|item| item.into_key()) });
    tokio::task::yield_now().await; // the get is now waiting too
    queue.add("a").unwrap();
    let got = timeout(BOUND, getter).await;
    assert_eq!(
        got.expect("the idle get was woken").unwrap(),
        Some("a"),
        "the key went to the get that is waiting"
    );
    drop(stream);
}

/// A worker that panics while holding an item does not lose the key: it comes back after the
/// rate limiter's delay, counted as a failure.
#[tokio::test(start_paused = true)]
async fn a_worker_panicking_with_an_item_requeues_it_rate_limited() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    queue.add("a").unwrap();
    let worker = queue.clone();
    let panicked = tokio::spawn(async move {
        let item = bounded(worker.get()).await.unwrap();
        assert_eq!(*item.key(), "a");
        panic!("reconcile failed with a panic");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(queue.processing_len(), 0, "the key is no longer in flight");
    assert_eq!(queue.num_requeues(&"a"), 1, "the panic counts as a failure");
    let start = Instant::now();
    let item = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!(*item.key(), "a");
    assert_eq!(
        start.elapsed(),
        ms(5),
        "after the default limiter's first delay"
    );
}

/// A panic after the queue shut down cannot requeue the key (adds are refused); the key is
/// marked done so a drain still ends.
#[tokio::test(start_paused = true)]
async fn a_panic_after_shutdown_marks_the_key_done_and_the_drain_ends() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    queue.add("a").unwrap();
    let item = bounded(queue.get()).await.unwrap();
    let drain = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.shut_down_with_drain().await })
    };
    tokio::task::yield_now().await;
    let panicked = tokio::spawn(async move {
        let _item = item;
        panic!("worker panics during the drain");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    timeout(BOUND, drain)
        .await
        .expect("the drain ended")
        .unwrap();
    assert_eq!(queue.processing_len(), 0);
}

/// The priority queue's guard follows the same policy, and the key comes back at the priority
/// it was handed out at.
#[tokio::test(start_paused = true)]
async fn a_priority_worker_panicking_requeues_the_key_at_its_priority() {
    let queue: ctrlq_queue_async::PriorityQueue<&str> = ctrlq_queue_async::PriorityQueue::new();
    queue.add_with_priority("a", 7).unwrap();
    let worker = queue.clone();
    let panicked = tokio::spawn(async move {
        let _item = bounded(worker.get()).await.unwrap();
        panic!("reconcile failed with a panic");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(queue.num_requeues(&"a"), 1);
    let start = Instant::now();
    let item = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!((*item.key(), item.priority()), ("a", 7));
    assert_eq!(
        start.elapsed(),
        ms(5),
        "after the default limiter's first delay"
    );
}

/// The stream of a queue can move to another task.
#[test]
fn the_stream_is_send() {
    fn send<T: Send>(_: &T) {}
    let queue: WorkQueue<String> = WorkQueue::new();
    send(&queue.stream());
}

/// A stream waiting on an empty queue is woken by an add, and at the end by the shutdown.
#[tokio::test(start_paused = true)]
async fn a_waiting_stream_is_woken_by_an_add_and_by_the_shutdown() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    let consumer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut keys = Vec::new();
            let mut stream = Box::pin(queue.stream());
            while let Some(item) = stream.next().await {
                keys.push(item.into_key());
            }
            keys
        })
    };
    tokio::task::yield_now().await; // the stream now waits
    queue.add("a").unwrap();
    tokio::task::yield_now().await;
    assert_eq!(queue.len(), 0, "the add woke the stream");
    queue.add("b").unwrap();
    tokio::task::yield_now().await;
    assert_eq!(queue.len(), 0, "and again");
    queue.shut_down();
    let keys = timeout(BOUND, consumer).await.expect("the stream ended");
    assert_eq!(keys.unwrap(), ["a", "b"]);
}

/// An item's `Debug` shows its key and priority.
#[tokio::test]
async fn an_item_debug_shows_its_key_and_priority() {
    let queue = ctrlq_queue_async::PriorityQueue::new();
    queue.add_with_priority("a", 3).unwrap();
    let item = soon(queue.get()).await.unwrap();
    assert_eq!(format!("{item:?}"), r#"Item { key: "a", priority: 3 }"#);
}

/// A stream counts as waiting only while it waits: after it took a key, and once it is
/// dropped while waiting, adds no longer wake streams.
#[tokio::test(start_paused = true)]
async fn a_stream_is_registered_only_while_it_waits() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    let waiting = |q: &WorkQueue<&str>| {
        let debug = format!("{q:?}");
        let at = debug.find("streams_waiting: ").expect("the field") + 17;
        debug[at..].split(',').next().unwrap().to_owned()
    };
    let mut stream = Box::pin(queue.stream());
    {
        let mut next = stream.next();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut next).poll(&mut cx).is_pending());
        assert_eq!(waiting(&queue), "1");
        queue.add("a").unwrap();
        let std::task::Poll::Ready(Some(item)) = std::pin::Pin::new(&mut next).poll(&mut cx) else {
            panic!("the stream takes the key")
        };
        item.done();
    }
    assert_eq!(waiting(&queue), "0", "not registered after taking a key");
    {
        let mut next = stream.next();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut next).poll(&mut cx).is_pending());
    }
    assert_eq!(waiting(&queue), "1", "the kept stream still waits");
    drop(stream);
    assert_eq!(waiting(&queue), "0", "dropped while waiting");
}

/// Delayed adds racing a shutdown on other threads: whatever the interleaving, no key waits
/// once both are over (a delayed add sets its timer under the timers' lock alone, so the
/// shutdown must be seen there too).
#[test]
fn delayed_adds_racing_a_shutdown_leave_no_key_waiting() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    for round in 0..100u32 {
        let queue: WorkQueue<u32> = runtime.block_on(async { WorkQueue::new() });
        let adder = {
            let queue = queue.clone();
            let handle = runtime.handle().clone();
            std::thread::spawn(move || {
                let _runtime = handle.enter();
                // Adds until refused: the shutdown lands in the middle of the adds.
                (0u32..)
                    .take_while(|&k| queue.add_after(k, Duration::from_secs(60)).is_ok())
                    .count()
            })
        };
        let started = std::time::Instant::now();
        while queue.waiting_len() < 10 + round as usize {
            if started.elapsed() > REAL_BOUND {
                queue.shut_down(); // ends the adder before the test fails
                panic!("round {round}: the delayed adds never came to wait");
            }
            std::hint::spin_loop();
        }
        queue.shut_down();
        let accepted = adder.join().expect("the adder");
        assert_eq!(queue.waiting_len(), 0, "round {round}: {accepted} accepted");
    }
}
