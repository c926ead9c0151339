//! Work queue behaviour: client-go's queue, delaying and rate-limiting scenarios (paused time),
//! plus the fixes (refused adds, full drain, add-now cancels a wait, guards, no leaked tasks).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_queue_async::metrics::testing::RecordingProvider;
use ctrlq_queue_async::{AddError, WorkQueue};
use ctrlq_ratelimit::{BucketRateLimiter, ExponentialRateLimiter};
use support::{bounded, let_run, paused_runtime, soon};
use tokio::time::{Instant, advance, sleep};

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ----- queue_test.go -----

async fn basic(drain: bool) {
    let queue: WorkQueue<String> = WorkQueue::new();
    let mut producers = Vec::new();
    for i in 0..50 {
        let q = queue.clone();
        producers.push(tokio::spawn(async move {
            for _ in 0..50 {
                q.add(i.to_string()).unwrap();
                sleep(MS).await;
            }
        }));
    }
    let mut consumers = Vec::new();
    for _ in 0..10 {
        let q = queue.clone();
        consumers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(item) = q.get().await {
                got.push(item.key().clone());
                sleep(3 * MS).await;
                item.done();
            }
            got
        }));
    }
    for p in producers {
        bounded(p).await.unwrap();
    }
    if drain {
        bounded(queue.shut_down_with_drain()).await;
    } else {
        queue.shut_down();
    }
    let refused = queue.add("added after shutdown!".into()).unwrap_err();
    assert_eq!(
        refused,
        AddError::ShutDown("added after shutdown!".to_string())
    );
    for c in consumers {
        let got = bounded(c).await.unwrap();
        assert!(!got.iter().any(|k| k == "added after shutdown!"));
    }
    assert_eq!(queue.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn basic_with_shut_down() {
    basic(false).await;
}

#[tokio::test(start_paused = true)]
async fn basic_with_drain() {
    basic(true).await;
}

async fn add_while_processing(drain: bool) {
    let queue: WorkQueue<u32> = WorkQueue::new();
    for i in 0..50 {
        queue.add(i).unwrap();
    }
    let seen = Arc::new(Mutex::new(HashMap::<u32, u32>::new()));
    let mut consumers = Vec::new();
    for _ in 0..10 {
        let (q, seen) = (queue.clone(), seen.clone());
        consumers.push(tokio::spawn(async move {
            let mut counters = HashMap::new();
            while let Some(item) = q.get().await {
                let c = counters.entry(*item.key()).or_insert(0);
                *c += 1;
                *seen.lock().unwrap().entry(*item.key()).or_insert(0) += 1;
                if *c < 2 {
                    let _ = q.add(*item.key());
                }
                sleep(MS).await;
                item.done();
            }
        }));
    }
    if drain {
        bounded(queue.shut_down_with_drain()).await;
    } else {
        sleep(ms(100)).await;
        queue.shut_down();
    }
    for c in consumers {
        bounded(c).await.unwrap();
    }
    assert_eq!(queue.len(), 0);
    // Every key was handed out at least once; re-adds while processing came back after done.
    assert_eq!(seen.lock().unwrap().len(), 50);
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_with_shut_down() {
    add_while_processing(false).await;
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_with_drain() {
    add_while_processing(true).await;
}

#[tokio::test]
async fn len_counts_queued_keys_once() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    assert_eq!(queue.len(), 1);
    queue.add("bar").unwrap();
    assert_eq!(queue.len(), 2);
    queue.add("foo").unwrap();
    assert_eq!(queue.len(), 2);
}

#[tokio::test]
async fn reinsert_while_processing_comes_back_after_done() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    let item = soon(queue.get()).await.unwrap();
    queue.add("foo").unwrap();
    assert_eq!(queue.len(), 0, "a processing key is not queued twice");
    item.done();
    let again = soon(queue.get()).await.unwrap();
    assert_eq!(*again, "foo");
    again.done();
    assert_eq!(queue.len(), 0);
}

#[tokio::test]
async fn collapse() {
    let queue = WorkQueue::new();
    queue.add("bar").unwrap();
    queue.add("bar").unwrap();
    let item = soon(queue.get()).await.unwrap();
    assert_eq!(*item, "bar");
    item.done();
    assert_eq!(queue.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn collapse_while_processing_blocks_the_second_worker() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    let item = bounded(queue.get()).await.unwrap();
    queue.add("foo").unwrap();
    queue.add("foo").unwrap();
    let q = queue.clone();
    let worker = tokio::spawn(async move {
        let item = bounded(q.get()).await.unwrap();
        let key = *item.key();
        item.done();
        key
    });
    sleep(ms(100)).await;
    assert!(!worker.is_finished(), "foo is still being processed");
    item.done();
    assert_eq!(bounded(worker).await.unwrap(), "foo");
    assert_eq!(queue.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn drain_waits_for_in_flight_items() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    queue.add("bar").unwrap();
    let first = bounded(queue.get()).await.unwrap();
    let second = bounded(queue.get()).await.unwrap();
    let q = queue.clone();
    let drain = tokio::spawn(async move { q.shut_down_with_drain().await });
    assert!(bounded(queue.get()).await.is_none());
    let_run().await;
    assert!(!drain.is_finished(), "two items are in flight");
    first.done();
    let_run().await;
    assert!(!drain.is_finished(), "one item is in flight");
    second.done();
    bounded(drain).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn drain_waits_for_queued_items_too() {
    // The original waits for in-flight items only (kubernetes/kubernetes#141079).
    let queue = WorkQueue::new();
    queue.add("queued").unwrap();
    let q = queue.clone();
    let drain = tokio::spawn(async move { q.shut_down_with_drain().await });
    let_run().await;
    assert!(!drain.is_finished(), "a queued key is not drained yet");
    let item = bounded(queue.get()).await.unwrap();
    let_run().await;
    assert!(!drain.is_finished());
    item.done();
    bounded(drain).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shut_down_does_not_wait() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    queue.add("bar").unwrap();
    let _a = bounded(queue.get()).await.unwrap().into_key();
    let _b = bounded(queue.get()).await.unwrap().into_key();
    queue.shut_down();
    assert!(queue.is_shutting_down());
}

#[tokio::test(start_paused = true)]
async fn a_forced_shut_down_cuts_a_drain_short() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    queue.add("bar").unwrap();
    let a = bounded(queue.get()).await.unwrap().into_key();
    let b = bounded(queue.get()).await.unwrap().into_key();
    let q = queue.clone();
    let drain = tokio::spawn(async move { q.shut_down_with_drain().await });
    assert!(bounded(queue.get()).await.is_none());
    let_run().await;
    assert!(!drain.is_finished());
    queue.shut_down(); // the second SIGTERM
    bounded(drain).await.unwrap();
    let _ = (a, b);
}

/// A `done` that queues its key again (it was added while processing) wakes a `get` that
/// waits, without anything else waking it.
#[tokio::test(start_paused = true)]
async fn a_done_that_queues_its_key_again_wakes_a_waiting_get() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    let item = bounded(queue.get()).await.unwrap();
    queue.add("a").unwrap(); // dirty while processing
    let mut get = tokio_test::task::spawn(queue.get());
    tokio_test::assert_pending!(get.poll());
    assert!(!get.is_woken());
    item.done();
    assert!(get.is_woken(), "the done woke the waiting get");
    let item = tokio_test::assert_ready!(get.poll()).expect("open");
    assert_eq!(*item, "a");
}

#[tokio::test(start_paused = true)]
async fn drain_with_a_dirty_item_hands_it_out_again() {
    let queue = WorkQueue::new();
    queue.add("foo").unwrap();
    let gotten = bounded(queue.get()).await.unwrap();
    queue.add("foo").unwrap();
    let q = queue.clone();
    let drain = tokio::spawn(async move { q.shut_down_with_drain().await });
    let_run().await;
    gotten.done();
    let again = bounded(queue.get())
        .await
        .expect("the dirty key comes back during the drain");
    assert_eq!(*again, "foo");
    again.done();
    assert!(bounded(queue.get()).await.is_none());
    bounded(drain).await.unwrap();
}

#[tokio::test]
async fn no_clone_of_a_key_is_retained_after_done() {
    let queue = WorkQueue::new();
    let key = Arc::new("big object".to_string());
    queue.add(key.clone()).unwrap();
    let item = soon(queue.get()).await.unwrap();
    item.done();
    assert_eq!(Arc::strong_count(&key), 1);
}

// ----- adds in a batch -----

#[tokio::test(start_paused = true)]
async fn add_all_adds_like_adds_one_by_one() {
    let queue = WorkQueue::new();
    queue.add("b").unwrap();
    queue.add_all(["a", "b", "c", "a"]).unwrap();
    assert_eq!(
        queue.len(),
        3,
        "de-duplicated against the queue and within the batch"
    );
    let first = bounded(queue.get()).await.unwrap();
    assert_eq!(*first, "b", "an already queued key keeps its place");
    // A key of the batch that is being processed is marked to run again after done.
    queue.add_all(["b", "d"]).unwrap();
    let mut order = Vec::new();
    for _ in 0..3 {
        let item = bounded(queue.get()).await.unwrap();
        order.push(*item.key());
        item.done();
    }
    assert_eq!(order, ["a", "c", "d"]);
    assert!(queue.is_empty());
    first.done();
    assert_eq!(
        *bounded(queue.get()).await.unwrap(),
        "b",
        "handed out again after done"
    );
    queue.add_all(Vec::<&str>::new()).unwrap();
}

#[tokio::test]
async fn add_all_after_shutdown_hands_every_key_back() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    queue.shut_down();
    let refused = queue.add_all(["a", "b", "c"]).unwrap_err();
    assert_eq!(refused, AddError::ShutDown(vec!["a", "b", "c"]));
    assert_eq!(queue.len(), 1, "nothing added");
}

#[tokio::test(start_paused = true)]
async fn add_all_wakes_a_waiting_get_per_key() {
    let queue: WorkQueue<u32> = WorkQueue::new();
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.get().await.map(|item| item.into_key()) })
        })
        .collect();
    let_run().await;
    assert_eq!(queue.waiting_len(), 0);
    queue.add_all([7, 8, 9]).unwrap();
    let mut got = Vec::new();
    for getter in getters {
        let key = tokio::time::timeout(ms(10), getter)
            .await
            .expect("every waiting get is woken")
            .unwrap();
        got.push(key.expect("the queue is open"));
    }
    got.sort_unstable();
    assert_eq!(got, [7, 8, 9]);
}

#[tokio::test(start_paused = true)]
async fn add_all_ends_the_wait_of_a_delayed_key() {
    let queue = WorkQueue::new();
    queue.add_after("a", ms(100)).unwrap();
    assert_eq!(queue.waiting_len(), 1);
    queue.add_all(["a"]).unwrap();
    assert_eq!(queue.waiting_len(), 0, "the wait ended");
    let item = bounded(queue.get()).await.unwrap();
    item.done();
    sleep(ms(200)).await;
    assert!(queue.is_empty(), "the cancelled wait adds nothing later");
}

#[tokio::test]
async fn add_all_collects_the_keys_before_taking_the_lock() {
    // The iterator reads the queue: it would deadlock if it ran under the queue's lock.
    let queue = WorkQueue::new();
    let q = queue.clone();
    queue
        .add_all((0..3).inspect(move |_| {
            let _ = q.len();
        }))
        .unwrap();
    assert_eq!(queue.len(), 3);
}

// ----- guards -----

#[tokio::test]
async fn dropping_an_item_marks_it_done() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    {
        let _item = soon(queue.get()).await.unwrap();
        queue.add("a").unwrap();
        assert_eq!(queue.processing_len(), 1);
    } // e.g. a worker returned early with `?`
    assert_eq!(queue.processing_len(), 0);
    assert_eq!(
        queue.len(),
        1,
        "the re-add while processing is queued at the drop"
    );
}

#[tokio::test(start_paused = true)]
async fn requeue_paths_bring_the_key_back() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    bounded(queue.get()).await.unwrap().requeue().unwrap();
    assert_eq!(queue.len(), 1);
    let start = Instant::now();
    bounded(queue.get())
        .await
        .unwrap()
        .requeue_after(ms(30))
        .unwrap();
    assert_eq!(queue.len(), 0);
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(start.elapsed(), ms(30));
    item.requeue_rate_limited().unwrap();
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(start.elapsed(), ms(35), "5 ms from the default limiter");
    assert_eq!(queue.num_requeues(&"a"), 1);
    item.forget();
    assert_eq!(queue.num_requeues(&"a"), 0);
    assert_eq!(queue.processing_len(), 0);
}

#[tokio::test]
async fn into_key_leaves_done_to_the_caller() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    let key = soon(queue.get()).await.unwrap().into_key();
    assert_eq!(queue.processing_len(), 1);
    queue.done(&key);
    assert_eq!(queue.processing_len(), 0);
    queue.done(&"unknown"); // ignored
}

#[tokio::test]
async fn requeue_after_shutdown_is_refused_but_the_item_is_done() {
    let queue = WorkQueue::new();
    queue.add("a").unwrap();
    let item = soon(queue.get()).await.unwrap();
    queue.shut_down();
    assert_eq!(item.requeue_rate_limited(), Err(AddError::ShutDown("a")));
    assert_eq!(queue.processing_len(), 0);
    assert_eq!(queue.add_rate_limited("b"), Err(AddError::ShutDown("b")));
    assert_eq!(
        queue.num_requeues(&"b"),
        0,
        "a refused add does not charge the limiter"
    );
}

// ----- delaying_queue_test.go -----

#[tokio::test(start_paused = true)]
async fn delaying_simple() {
    let queue = WorkQueue::new();
    queue.add_after("foo", ms(50)).unwrap();
    queue.settle().await;
    assert_eq!(queue.len(), 0);
    advance(ms(60)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
    bounded(queue.get()).await.unwrap().done();
    advance(Duration::from_secs(10)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn delaying_dedup_keeps_the_earliest_deadline() {
    let queue = WorkQueue::new();
    queue.add_after("foo", ms(50)).unwrap();
    queue.add_after("foo", ms(70)).unwrap();
    queue.settle().await;
    assert_eq!(queue.len(), 0);
    advance(ms(60)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
    bounded(queue.get()).await.unwrap().done();
    advance(ms(20)).await;
    queue.settle().await;
    assert_eq!(
        queue.len(),
        0,
        "the 70 ms request was merged into the 50 ms one"
    );

    queue.add_after("foo", ms(50)).unwrap();
    queue.add_after("foo", ms(30)).unwrap();
    queue.settle().await;
    assert_eq!(queue.len(), 0);
    advance(ms(40)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1, "the earlier 30 ms won");
    bounded(queue.get()).await.unwrap().done();
    advance(ms(20)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn delaying_two_fire_early() {
    let queue = WorkQueue::new();
    queue.add_after("foo", Duration::from_secs(1)).unwrap();
    queue.add_after("bar", ms(50)).unwrap();
    queue.settle().await;
    assert_eq!(queue.len(), 0);
    advance(ms(60)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
    assert_eq!(bounded(queue.get()).await.unwrap().into_key(), "bar");
    queue.add_after("baz", Duration::from_secs(2)).unwrap();
    advance(Duration::from_secs(1)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
    assert_eq!(bounded(queue.get()).await.unwrap().into_key(), "foo");
    advance(Duration::from_secs(2)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
    assert_eq!(bounded(queue.get()).await.unwrap().into_key(), "baz");
}

#[tokio::test(start_paused = true)]
async fn delaying_copy_shifting_adds_in_deadline_order() {
    let queue = WorkQueue::new();
    queue.add_after("foo", Duration::from_secs(1)).unwrap();
    queue.add_after("bar", ms(500)).unwrap();
    queue.add_after("baz", ms(250)).unwrap();
    queue.settle().await;
    assert_eq!(queue.len(), 0);
    advance(Duration::from_secs(2)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 3);
    let order: Vec<&str> = [
        bounded(queue.get()).await.unwrap().into_key(),
        bounded(queue.get()).await.unwrap().into_key(),
        bounded(queue.get()).await.unwrap().into_key(),
    ]
    .into();
    assert_eq!(order, ["baz", "bar", "foo"]);
}

#[tokio::test(start_paused = true)]
async fn an_add_now_cancels_the_wait() {
    // The original runs the key twice (kubernetes/kubernetes#126027).
    let queue = WorkQueue::new();
    queue.add_after("a", ms(100)).unwrap();
    queue.add("a").unwrap();
    assert_eq!(queue.waiting_len(), 0);
    bounded(queue.get()).await.unwrap().done();
    sleep(ms(200)).await;
    queue.settle().await;
    assert_eq!(
        queue.len(),
        0,
        "the cancelled wait does not add the key again"
    );
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_now_and_huge_delays_are_clamped() {
    let queue = WorkQueue::new();
    queue.add_after("now", Duration::ZERO).unwrap();
    assert_eq!(queue.len(), 1);
    queue
        .add_after("far", Duration::from_secs(u64::MAX))
        .unwrap();
    queue.settle().await;
    assert_eq!(queue.waiting_len(), 1);
}

#[tokio::test(start_paused = true)]
async fn get_waits_exactly_until_the_deadline() {
    let queue = WorkQueue::new();
    let start = Instant::now();
    queue.add_after("a", ms(1234)).unwrap();
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(start.elapsed(), ms(1234));
    assert_eq!(*item, "a");
}

// ----- rate_limiting_queue_test.go -----

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_follow_the_limiter() {
    let limiter = ExponentialRateLimiter::new(MS, Duration::from_secs(1)).unwrap();
    let queue: WorkQueue<&str> = WorkQueue::builder().rate_limiter(Arc::new(limiter)).build();
    let start = Instant::now();
    queue.add_rate_limited("one").unwrap(); // 1 ms
    queue.add_rate_limited("one").unwrap(); // 2 ms: the earlier deadline (1 ms) is kept
    assert_eq!(queue.num_requeues(&"one"), 2);
    queue.add_rate_limited("two").unwrap(); // 1 ms
    queue.add_rate_limited("two").unwrap(); // 2 ms
    queue.forget(&"one");
    assert_eq!(queue.num_requeues(&"one"), 0);
    queue.add_rate_limited("one").unwrap(); // 1 ms again
    let a = bounded(queue.get()).await.unwrap();
    let b = bounded(queue.get()).await.unwrap();
    assert_eq!(start.elapsed(), MS);
    let mut keys = [*a.key(), *b.key()];
    keys.sort_unstable();
    assert_eq!(keys, ["one", "two"]);
}

// ----- lifecycle -----

/// The timer task, which refreshes the gauges, starts at the first add of a queue with
/// metrics, once, whichever add it is, and never for a queue without metrics and delays.
#[tokio::test(start_paused = true)]
async fn only_a_queue_with_metrics_starts_its_timer_task_at_an_add_and_only_once() {
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let base = tasks();
    let plain: WorkQueue<&str> = WorkQueue::new();
    plain.add("a").unwrap();
    plain.add_all(["b", "c"]).unwrap();
    plain.add_after("d", Duration::ZERO).unwrap();
    assert_eq!(tasks(), base, "no metrics, no task");

    for add in 0..3 {
        let provider = Arc::new(RecordingProvider::default());
        let measured: WorkQueue<&str> = WorkQueue::builder()
            .name("measured")
            .metrics(provider)
            .build();
        for _ in 0..2 {
            match add {
                0 => measured.add("a").unwrap(),
                1 => measured.add_all(["a", "b"]).unwrap(),
                _ => measured.add_after("a", Duration::ZERO).unwrap(),
            }
            assert_eq!(tasks(), base + 1, "add #{add}: one timer task");
        }
        measured.shut_down();
        let_run().await;
        assert_eq!(tasks(), base, "add #{add}: it ends at shutdown");
    }
}

#[tokio::test(start_paused = true)]
async fn the_delay_task_ends_at_shutdown() {
    let queue = WorkQueue::new();
    let key = Arc::new(1);
    queue
        .add_after(key.clone(), Duration::from_secs(3600))
        .unwrap();
    queue.settle().await;
    assert_eq!(Arc::strong_count(&key), 2, "the waiting keys hold it, once");
    queue.shut_down();
    let_run().await;
    assert_eq!(
        Arc::strong_count(&key),
        1,
        "the task and its timer are gone"
    );
}

#[tokio::test(start_paused = true)]
async fn a_delayed_add_from_a_thread_outside_the_runtime_fires() {
    let queue = WorkQueue::new();
    // The first delayed add starts the timer task; once its key fired, no timer is left, so
    // the next one needs a new `Sleep`, which must bind to the task's runtime and clock even
    // though this add comes from a plain thread.
    queue.add_after("first", MS).unwrap();
    advance(MS).await;
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(*item.key(), "first");
    item.done();
    // Put the paused clock an hour ahead of the real one: a deadline read from the plain
    // thread's (real) clock would then be long past, and the key would fire at once.
    advance(Duration::from_secs(3600)).await;
    let q = queue.clone();
    std::thread::spawn(move || q.add_after("second", 5 * MS).unwrap())
        .join()
        .expect("adding from a plain thread does not panic");
    let start = Instant::now();
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(*item.key(), "second");
    assert_eq!(
        start.elapsed(),
        5 * MS,
        "on time, by the runtime's paused clock"
    );
}

/// A queue's timers belong to its runtime, as tokio's do: once that runtime has shut down,
/// nothing times the queue. A key waiting for its delay still waits, and so does one delayed
/// later (here from a second runtime); an add of it ends its wait.
#[test]
fn a_queue_outliving_its_runtime_times_nothing_and_an_add_ends_a_wait() {
    let queue = paused_runtime().block_on(async {
        let queue = WorkQueue::new();
        queue.add_after("early", MS).unwrap();
        queue.add_after("late", Duration::from_secs(60)).unwrap();
        let item = bounded(queue.get()).await.unwrap();
        assert_eq!(*item.key(), "early");
        item.done();
        queue
    });
    assert_eq!(
        (queue.waiting_len(), queue.len()),
        (1, 0),
        "late still waits"
    );
    paused_runtime().block_on(async {
        queue.add_after("next", MS).unwrap();
        assert_eq!(queue.waiting_len(), 2);
        let none = tokio::time::timeout(Duration::from_secs(120), queue.get()).await;
        assert!(none.is_err(), "no timer rings for the queue any more");
        queue.add("late").unwrap();
        let item = bounded(queue.get()).await.unwrap();
        assert_eq!(*item.key(), "late");
        assert_eq!(queue.waiting_len(), 1, "only next waits");
    });
}

/// The timer task, which refreshes the gauges, runs on the queue's runtime and does not move: once that runtime has shut
/// down, the gauges it refreshes stay as they were, while the counts an add or a get records
/// go on.
#[test]
fn a_queue_outliving_its_runtime_keeps_its_counts_but_not_the_refresh() {
    let p = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<&str> = paused_runtime()
        .block_on(async { WorkQueue::builder().name("test").metrics(p.clone()).build() });
    paused_runtime().block_on(async {
        queue.add("b").unwrap();
        let item = bounded(queue.get()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let seen = p.recorded();
        assert_eq!(seen.adds, 1);
        assert_eq!(
            seen.unfinished_work_seconds, 0.0,
            "no refresh loop on this runtime: {seen:?}"
        );
        item.done();
    });
}

/// The first delayed add of a queue, from a plain thread (no timer task yet, and no runtime on
/// that thread), is timed on the queue's runtime instead of being added at once.
#[tokio::test(start_paused = true)]
async fn a_first_delayed_add_from_a_plain_thread_waits_its_delay() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    let q = queue.clone();
    std::thread::spawn(move || q.add_after("a", 5 * MS).unwrap())
        .join()
        .expect("a plain thread may add");
    assert_eq!(queue.len(), 0, "waiting, not added at once");
    let start = Instant::now();
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!((*item.key(), start.elapsed()), ("a", 5 * MS));
}

/// A rate-limited add from a plain thread (outside any runtime) charges the limiter by the
/// queue's runtime clock: an hour of paused time has refilled the bucket, whatever the real
/// clock says.
#[tokio::test(start_paused = true)]
async fn a_rate_limited_add_from_a_plain_thread_reads_the_queue_runtime_clock() {
    let limiter = Arc::new(BucketRateLimiter::per_second(1, 1).unwrap());
    let queue: WorkQueue<&str> = WorkQueue::builder().rate_limiter(limiter).build();
    queue.add_rate_limited("first").unwrap();
    bounded(queue.get()).await.unwrap().done();
    advance(Duration::from_secs(3600)).await;
    let q = queue.clone();
    std::thread::spawn(move || q.add_rate_limited("second").unwrap())
        .join()
        .expect("a plain thread may add");
    let start = Instant::now();
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(*item.key(), "second");
    assert_eq!(start.elapsed(), Duration::ZERO, "the bucket had refilled");
}

/// An item finished on a plain thread (outside any runtime) is timed by the queue's runtime
/// clock: its work duration is the paused time it took, not a reading of the real clock.
#[tokio::test(start_paused = true)]
async fn work_finished_on_a_plain_thread_is_timed_by_the_queue_runtime_clock() {
    let p = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<&str> = WorkQueue::builder().name("test").metrics(p.clone()).build();
    queue.add("a").unwrap();
    let item = bounded(queue.get()).await.unwrap();
    advance(Duration::from_secs(5)).await;
    std::thread::spawn(move || item.done())
        .join()
        .expect("a plain thread may finish an item");
    assert_eq!(p.recorded().work_durations, [5.0]);
}

#[tokio::test(start_paused = true)]
async fn the_delay_task_ends_with_the_last_handle() {
    let queue = WorkQueue::new();
    let key = Arc::new(1);
    queue
        .add_after(key.clone(), Duration::from_secs(3600))
        .unwrap();
    queue.settle().await;
    drop(queue);
    let_run().await;
    assert_eq!(
        Arc::strong_count(&key),
        1,
        "the task and its timer are gone"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiting_get() {
    let queue: WorkQueue<u8> = WorkQueue::new();
    let mut gets = Vec::new();
    for _ in 0..5 {
        let q = queue.clone();
        gets.push(tokio::spawn(async move { q.get().await.is_none() }));
    }
    let_run().await;
    queue.shut_down();
    for g in gets {
        assert!(bounded(g).await.unwrap());
    }
}

#[tokio::test(start_paused = true)]
async fn many_workers_never_share_a_key() {
    let queue: WorkQueue<u32> = WorkQueue::new();
    let in_flight = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let (q, f, v) = (queue.clone(), in_flight.clone(), violations.clone());
        workers.push(tokio::spawn(async move {
            while let Some(item) = q.get().await {
                if !f.lock().unwrap().insert(*item.key()) {
                    v.fetch_add(1, Ordering::Relaxed);
                }
                sleep(MS).await;
                f.lock().unwrap().remove(item.key());
                item.done();
            }
        }));
    }
    for round in 0..200u32 {
        queue.add(round % 7).unwrap();
        if round % 3 == 0 {
            sleep(MS).await;
        }
    }
    bounded(queue.shut_down_with_drain()).await;
    for w in workers {
        bounded(w).await.unwrap();
    }
    assert_eq!(violations.load(Ordering::Relaxed), 0);
}

/// A queue dropped with keys still counted (queued, dirty while processing, in flight) takes
/// them off its gauges: the next queue under the same series (a controller's next term) starts
/// from what other queues put there, not from this one's leftovers.
#[tokio::test(start_paused = true)]
async fn a_dropped_queue_takes_what_it_still_counts_off_its_gauges() {
    let p = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<&str> = WorkQueue::builder().name("test").metrics(p.clone()).build();
    for key in ["a", "b", "c"] {
        queue.add(key).unwrap();
    }
    let item = bounded(queue.get()).await.unwrap();
    queue.add("a").unwrap(); // dirty while processing
    sleep(Duration::from_secs(1)).await; // the refresh loop sets the unfinished-work gauges
    let seen = p.recorded();
    assert_eq!(seen.depth[&None], 3);
    assert!(seen.unfinished_work_seconds > 0.0, "{seen:?}");
    queue.shut_down();
    let _in_flight = item.into_key(); // handed out, never done
    drop(queue);
    let seen = p.recorded();
    assert_eq!(seen.depth[&None], 0, "{seen:?}");
    assert_eq!(seen.unfinished_work_seconds, 0.0, "{seen:?}");
    assert_eq!(seen.longest_running_processor_seconds, 0.0, "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_should_take_any_limiter_without_a_cast() {
    // Owned, shared as `Arc<L>` (the caller keeps a handle), or already `Arc<dyn _>`.
    let owned: WorkQueue<String> = WorkQueue::builder()
        .rate_limiter(ctrlq_ratelimit::default_controller_rate_limiter())
        .build();
    let shared = Arc::new(ExponentialRateLimiter::new(MS, Duration::from_secs(1)).unwrap());
    let queue: WorkQueue<String> = WorkQueue::builder().rate_limiter(shared.clone()).build();
    let erased: Arc<dyn ctrlq_ratelimit::RateLimiter<String>> = shared.clone();
    let priority: ctrlq_queue_async::PriorityQueue<String> =
        ctrlq_queue_async::PriorityQueue::builder()
            .rate_limiter(erased)
            .build();

    queue.add_rate_limited("a".to_string()).unwrap();
    assert_eq!(
        ctrlq_ratelimit::RateLimiter::num_requeues(&*shared, &"a".to_string()),
        1
    );
    owned.add_rate_limited("a".to_string()).unwrap();
    assert_eq!(owned.num_requeues(&"a".to_string()), 1);
    priority.add_rate_limited("a".to_string()).unwrap();
    assert_eq!(
        queue.num_requeues(&"a".to_string()),
        2,
        "one limiter behind both queues"
    );
}
