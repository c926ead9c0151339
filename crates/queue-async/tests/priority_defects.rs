//! Depth by priority through raises, aging through a raise, one done per hand-out, and where the
//! priority queue follows or departs from controller-runtime's (paused time, every wait
//! bounded).

mod support;

use std::collections::{HashSet, VecDeque};
use std::ops::Deref;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestRunner};

use ctrlq_queue_async::metrics::testing::RecordingProvider;
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{PriorityQueue, WorkQueue};
use ctrlq_ratelimit::RateLimiter;
use support::BOUND;
use tokio::time::{advance, timeout};
use tokio_test::task;

#[tokio::test(start_paused = true)]
async fn a_raise_keeps_the_age_of_the_first_add() {
    // Aging 100 ms: `old`, ready 900 ms at 0 and raised to 1, ranks 1 + 9 = 10 against 5.
    let queue = PriorityQueue::builder()
        .aging(Duration::from_millis(100))
        .build();
    queue.add_with_priority("old", 0).unwrap();
    advance(Duration::from_millis(900)).await;
    queue.add_with_priority("old", 1).unwrap();
    queue.add_with_priority("fresh", 5).unwrap();
    let first = timeout(BOUND, queue.get()).await.unwrap().unwrap();
    assert_eq!((*first, first.priority()), ("old", 1));
}

fn with_metrics() -> (PriorityQueue<&'static str>, Arc<RecordingProvider>) {
    let recording = Arc::new(RecordingProvider::default());
    let queue = PriorityQueue::builder()
        .name("test")
        .metrics(recording.clone())
        .build();
    (queue, recording)
}

/// The depth series by priority (the priority queue has no unlabelled one).
fn depth(m: &RecordingProvider) -> Vec<(i32, i64)> {
    m.recorded()
        .depth
        .iter()
        .map(|(p, v)| (p.expect("labelled by priority"), *v))
        .collect()
}

async fn get<T>(next: impl Future<Output = Option<T>>) -> T {
    timeout(BOUND, next)
        .await
        .expect("a key")
        .expect("not shut down")
}

/// Whether a `get` would wait (a bounded poll under paused time).
async fn waits<F: Future>(next: F) -> bool {
    timeout(Duration::from_secs(1), next).await.is_err()
}

#[tokio::test(start_paused = true)]
async fn depth_follows_a_raise_of_a_key_re_added_while_processing() {
    let (queue, m) = with_metrics();
    queue.add("k").unwrap();
    let first = get(queue.get()).await;
    queue.add_with_priority("k", 0).unwrap();
    assert_eq!(depth(&m), [(0, 1)]);
    queue.add_with_priority("k", 5).unwrap();
    // controller-runtime moves the series of a re-added key held by a worker.
    assert_eq!(depth(&m), [(0, 0), (5, 1)]);
    first.done();
    let second = get(queue.get()).await;
    assert_eq!(second.priority(), 5);
    second.done();
    assert_eq!(depth(&m), [(0, 0), (5, 0)]);
}

#[tokio::test(start_paused = true)]
async fn depth_follows_a_delayed_higher_priority_add_of_a_key_re_added_while_processing() {
    let (queue, m) = with_metrics();
    queue.add("k").unwrap();
    let first = get(queue.get()).await;
    queue.add_with_priority("k", 0).unwrap();
    queue
        .add_with(
            "k",
            AddOptions::default()
                .after(Duration::from_secs(1))
                .priority(7),
        )
        .unwrap();
    advance(Duration::from_secs(2)).await;
    queue.settle().await;
    first.done();
    let second = get(queue.get()).await;
    assert_eq!(second.priority(), 7);
    second.done();
    assert!(depth(&m).iter().all(|&(_, d)| d == 0), "{:?}", depth(&m));
}

/// On either queue: the queue's `done` for a key held by an item, then the item's drop.
async fn one_done_per_hand_out<T: Deref<Target = &'static str>>(
    add: impl Fn(),
    next: impl AsyncFn() -> Option<T>,
    done: impl Fn(),
) {
    add();
    let a = get(next()).await;
    // `k` is held by `a`: the queue's `done` belongs to no hand-out taken out with `into_key`.
    done();
    add();
    assert!(waits(next()).await, "k is still held by a");
    drop(a); // a's done: k, re-added meanwhile, is queued again
    let b = get(next()).await;
    add();
    assert!(waits(next()).await, "k is held by b");
    drop(b);
    let c = get(next()).await;
    assert_eq!(*c, "k");
}

#[tokio::test(start_paused = true)]
async fn a_done_ends_only_its_own_hand_out_priority_queue() {
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    one_done_per_hand_out(
        || queue.add("k").unwrap(),
        async || queue.get().await,
        || queue.done(&"k"),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_done_ends_only_its_own_hand_out_work_queue() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    one_done_per_hand_out(
        || queue.add("k").unwrap(),
        async || queue.get().await,
        || queue.done(&"k"),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_key_taken_out_is_done_by_the_queue_once() {
    let queue: WorkQueue<&str> = WorkQueue::new();
    queue.add("k").unwrap();
    let key = get(queue.get()).await.into_key();
    queue.add("k").unwrap();
    assert!(waits(queue.get()).await);
    queue.done(&key);
    let again = get(queue.get()).await;
    assert_eq!(*again, "k");
    // A second done of the key taken out does not end the item's hand-out.
    queue.done(&key);
    queue.add("k").unwrap();
    assert!(waits(queue.get()).await, "k is held by `again`");
}

// ----- differences from controller-runtime, where matched -----

#[tokio::test(start_paused = true)]
async fn a_delayed_add_of_a_key_re_added_while_processing_is_absorbed() {
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    queue.add("k").unwrap();
    let first = get(queue.get()).await;
    queue.add("k").unwrap();
    queue.add_after("k", Duration::from_secs(1)).unwrap();
    assert_eq!(queue.waiting_len(), 0, "absorbed by the pending re-add");
    first.done();
    get(queue.get()).await.done();
    advance(Duration::from_secs(2)).await;
    queue.settle().await;
    assert!(
        waits(queue.get()).await,
        "handed out twice, not three times"
    );
}

#[tokio::test(start_paused = true)]
async fn keys_due_together_order_by_their_last_add_or_raise_not_deadline_move() {
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    let at = |p, s| {
        AddOptions::default()
            .after(Duration::from_secs(s))
            .priority(p)
    };
    // A raise refreshes the order: `a`, raised to 1 after `b` was added at 1, comes second.
    queue.add_with("a", at(0, 1)).unwrap();
    queue.add_with("b", at(1, 1)).unwrap();
    queue.add_with("a", at(1, 1)).unwrap();
    // A deadline move does not: `c`, first added before `d`, stays ahead of it.
    queue.add_with("c", at(0, 2)).unwrap();
    queue.add_with("d", at(0, 1)).unwrap();
    queue.add_with("c", at(0, 1)).unwrap();
    advance(Duration::from_secs(1)).await;
    queue.settle().await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let item = get(queue.get()).await;
        order.push(*item);
    }
    assert_eq!(order, ["b", "a", "c", "d"]);
}

/// A limiter that never delays.
struct NoDelay;
impl RateLimiter<&'static str> for NoDelay {
    fn when(&self, _key: &&'static str) -> Duration {
        Duration::ZERO
    }
    fn forget(&self, _key: &&'static str) {}
    fn num_requeues(&self, _key: &&'static str) -> usize {
        0
    }
}

#[tokio::test(start_paused = true)]
async fn a_priority_queue_counts_retries_only_for_a_delay_above_zero() {
    let recording = Arc::new(RecordingProvider::default());
    let queue: PriorityQueue<&str> = PriorityQueue::builder()
        .name("test")
        .metrics(recording.clone())
        .rate_limiter(Arc::new(NoDelay))
        .build();
    queue.add_after("a", Duration::ZERO).unwrap();
    get(queue.get())
        .await
        .requeue_after(Duration::ZERO)
        .unwrap();
    get(queue.get()).await.requeue_rate_limited().unwrap();
    get(queue.get()).await.done();
    queue.add_rate_limited("a").unwrap();
    assert_eq!(recording.recorded().retries, 0, "controller-runtime's rule");
    get(queue.get())
        .await
        .requeue_after(Duration::from_millis(1))
        .unwrap();
    queue.add_after("b", Duration::from_millis(1)).unwrap();
    assert_eq!(recording.recorded().retries, 2);
}

#[tokio::test(start_paused = true)]
async fn a_work_queue_counts_every_delayed_add_as_client_go() {
    let recording = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<&str> = WorkQueue::builder()
        .name("test")
        .metrics(recording.clone())
        .build();
    queue.add_after("a", Duration::ZERO).unwrap();
    get(queue.get())
        .await
        .requeue_after(Duration::ZERO)
        .unwrap();
    assert_eq!(recording.recorded().retries, 2);
}

#[tokio::test(start_paused = true)]
async fn adding_with_a_priority_has_a_short_form() {
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    queue.add_with_priority("a", 3).unwrap();
    queue
        .add_with("b", AddOptions::default().priority(3))
        .unwrap();
    queue.add_with_priority("c", 4).unwrap();
    let order: Vec<(&str, i32)> = [
        get(queue.get()).await,
        get(queue.get()).await,
        get(queue.get()).await,
    ]
    .iter()
    .map(|item| (**item, item.priority()))
    .collect();
    assert_eq!(order, [("c", 4), ("a", 3), ("b", 3)]);
}

// ----- differences from controller-runtime, kept and documented -----

#[tokio::test(start_paused = true)]
async fn a_waiting_key_added_now_queues_as_of_now() {
    // controller-runtime would put `a` first (its counter from the delayed add); here keys queue
    // by when they became ready, as both do for a key whose delay ends.
    let queue: PriorityQueue<&str> = PriorityQueue::new();
    queue.add_after("a", Duration::from_secs(10)).unwrap();
    queue.add("b").unwrap();
    queue.add("a").unwrap();
    assert_eq!(queue.waiting_len(), 0);
    let first = get(queue.get()).await;
    let second = get(queue.get()).await;
    assert_eq!((*first, *second), ("b", "a"));
}

// ----- hand-outs against a model -----

#[derive(Debug, Clone)]
enum Step {
    Add(u8),
    Get,
    /// Drop the i-th held item.
    Drop(usize),
    /// Take the key out of the i-th held item.
    IntoKey(usize),
    /// The queue's `done` for a key: a taken-out one, a held one or a stray one.
    Done(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..4).prop_map(Step::Add),
        3 => Just(Step::Get),
        2 => (0usize..8).prop_map(Step::Drop),
        1 => (0usize..8).prop_map(Step::IntoKey),
        2 => (0u8..4).prop_map(Step::Done),
    ]
}

/// client-go's sets, with who holds each processing key: an item, or the caller (taken out).
#[derive(Default)]
struct HandOuts {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    by_item: Vec<u8>,
    taken_out: HashSet<u8>,
}

impl HandOuts {
    fn processing(&self, k: u8) -> bool {
        self.by_item.contains(&k) || self.taken_out.contains(&k)
    }
    fn add(&mut self, k: u8) {
        if self.dirty.insert(k) && !self.processing(k) {
            self.queue.push_back(k);
        }
    }
    fn get(&mut self) -> Option<u8> {
        let k = self.queue.pop_front()?;
        self.dirty.remove(&k);
        self.by_item.push(k);
        Some(k)
    }
    fn finish(&mut self, k: u8) {
        if self.dirty.contains(&k) {
            self.queue.push_back(k);
        }
    }
}

#[test]
fn a_key_has_one_holder_whatever_the_dones() {
    let mut runner = TestRunner::new(Config {
        cases: 3_000,
        rng_seed: RngSeed::Fixed(0x5eed_0d0e),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/hand_outs.txt",
        ))),
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(step(), 1..40), |steps| {
            let queue: WorkQueue<u8> = WorkQueue::new();
            let mut model = HandOuts::default();
            let mut held: Vec<ctrlq_queue_async::Item<u8>> = Vec::new();
            for s in steps {
                match s {
                    Step::Add(k) => {
                        queue.add(k).unwrap();
                        model.add(k);
                    }
                    Step::Get => {
                        let got = match task::spawn(queue.get()).poll() {
                            Poll::Ready(item) => item,
                            Poll::Pending => None,
                        };
                        prop_assert_eq!(got.as_ref().map(|i| **i), model.get());
                        held.extend(got);
                    }
                    Step::Drop(i) if !held.is_empty() => {
                        let item = held.remove(i % held.len());
                        let pos = model.by_item.iter().position(|k| k == &*item).unwrap();
                        let k = model.by_item.remove(pos);
                        drop(item);
                        model.finish(k);
                    }
                    Step::IntoKey(i) if !held.is_empty() => {
                        let k = held.remove(i % held.len()).into_key();
                        let pos = model.by_item.iter().position(|x| *x == k).unwrap();
                        model.by_item.remove(pos);
                        model.taken_out.insert(k);
                    }
                    Step::Done(k) => {
                        queue.done(&k);
                        if model.taken_out.remove(&k) {
                            model.finish(k);
                        }
                    }
                    Step::Drop(_) | Step::IntoKey(_) => {}
                }
                let holders = model.by_item.len() + model.taken_out.len();
                prop_assert_eq!(queue.processing_len(), holders);
                prop_assert_eq!(queue.len(), model.queue.len());
                let mut distinct: HashSet<u8> = held.iter().map(|i| **i).collect();
                distinct.extend(model.taken_out.iter().copied());
                prop_assert_eq!(distinct.len(), holders, "one holder per key");
            }
            Ok(())
        })
        .unwrap();
}
