//! Priority work queue: controller-runtime's scenarios (paused time), starvation with aging,
//! cancel safety and a property test against a model.

mod support;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_queue_async::metrics::testing::RecordingProvider;
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{AddError, Item, PriorityQueue};
use ctrlq_ratelimit::{ExponentialRateLimiter, RateLimiter};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestRunner};
use support::{BOUND, bounded};
use tokio::time::{Instant, advance, sleep, timeout};
use tokio_test::task;

fn at(p: i32) -> AddOptions {
    AddOptions::default().priority(p)
}

fn after(d: Duration) -> AddOptions {
    AddOptions::default().after(d)
}

fn queue_with_metrics() -> (PriorityQueue<&'static str>, Arc<RecordingProvider>) {
    let recording = Arc::new(RecordingProvider::default());
    let q = PriorityQueue::builder()
        .name("test")
        .metrics(recording.clone())
        .build();
    (q, recording)
}

/// Depth per priority, as controller-runtime's fake provider records it.
fn depth(m: &RecordingProvider) -> Vec<(i32, i64)> {
    m.recorded()
        .depth
        .iter()
        .filter_map(|(p, v)| p.map(|p| (p, *v)))
        .collect()
}

fn adds(m: &RecordingProvider) -> u64 {
    m.recorded().adds
}

/// The next item, within [`BOUND`].
async fn got<K: Hash + Eq + Clone + Send + Sync + 'static>(q: &PriorityQueue<K>) -> Item<K> {
    timeout(BOUND, q.get())
        .await
        .expect("an item within the bound")
        .expect("the queue is open")
}

async fn next(q: &PriorityQueue<&'static str>) -> (&'static str, i32) {
    let item = timeout(BOUND, q.get())
        .await
        .expect("an item within the bound")
        .unwrap();
    let out = (*item.key(), item.priority());
    let _ = item.into_key();
    out
}

#[tokio::test(start_paused = true)]
async fn returns_items_in_order_and_counts_them() {
    let (q, m) = queue_with_metrics();
    q.add("foo").unwrap();
    q.add("bar").unwrap();
    assert_eq!(next(&q).await, ("foo", 0));
    assert_eq!(next(&q).await, ("bar", 0));
    assert_eq!(depth(&m), [(0, 0)]);
    assert_eq!(adds(&m), 2);
}

#[tokio::test(start_paused = true)]
async fn skips_a_locked_item_and_returns_it_once_unlocked() {
    let (q, m) = queue_with_metrics();
    q.add("foo").unwrap();
    let foo = got(&q).await;
    q.add("foo").unwrap();
    q.add("bar").unwrap();
    assert_eq!(next(&q).await, ("bar", 0));
    assert_eq!(depth(&m), [(0, 1)]);
    assert_eq!(adds(&m), 3);
    q.add("baz").unwrap();
    foo.done();
    // foo was re-added before baz: it comes first once unlocked.
    assert_eq!(next(&q).await, ("foo", 0));
    assert_eq!(depth(&m), [(0, 1)]);
    assert_eq!(adds(&m), 4);
}

#[tokio::test(start_paused = true)]
async fn de_duplicates_and_keeps_the_highest_priority() {
    let (q, m) = queue_with_metrics();
    q.add("foo").unwrap();
    q.add("foo").unwrap();
    assert_eq!((q.len(), q.processing_len(), adds(&m)), (1, 0, 1));
    let (q, m) = queue_with_metrics();
    q.add_with("foo", at(1)).unwrap();
    q.add_with("foo", at(2)).unwrap();
    assert_eq!(next(&q).await, ("foo", 2));
    assert_eq!(q.len(), 0);
    assert_eq!(depth(&m), [(1, 0), (2, 0)]);
    assert_eq!(adds(&m), 1);
    let (q, m) = queue_with_metrics();
    q.add_with("foo", at(2)).unwrap();
    q.add_with("foo", at(1)).unwrap();
    assert_eq!(next(&q).await, ("foo", 2), "a priority never drops");
    assert_eq!(depth(&m), [(2, 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_raise_goes_to_the_front_and_is_fifo_in_the_new_priority() {
    let (q, m) = queue_with_metrics();
    for k in ["foo", "bar", "baz"] {
        q.add(k).unwrap();
    }
    q.add_with("baz", at(1)).unwrap();
    assert_eq!(next(&q).await, ("baz", 1));
    assert_eq!(q.len(), 2);
    assert_eq!(depth(&m), [(0, 2), (1, 0)]);
    assert_eq!(adds(&m), 3);

    let q = PriorityQueue::new();
    q.add_with("foo", at(0)).unwrap();
    q.add_with("bar", at(1)).unwrap();
    q.add_with("foo", at(1)).unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(next(&q).await, ("bar", 1));
    assert_eq!(next(&q).await, ("foo", 1));
}

#[tokio::test(start_paused = true)]
async fn keeps_the_earliest_deadline_and_len_counts_ready_items_only() {
    let q = PriorityQueue::new();
    q.add_with("foo", after(Duration::ZERO)).unwrap();
    q.add_with("foo", after(Duration::from_secs(3600))).unwrap();
    assert_eq!(q.len(), 1, "ready now; the later deadline is absorbed");
    assert_eq!(next(&q).await, ("foo", 0));
    assert_eq!(q.len(), 0);

    let (q, m) = queue_with_metrics();
    q.add_with("foo", after(Duration::from_secs(60))).unwrap();
    q.add("baz").unwrap();
    q.add_with("bar", after(Duration::from_secs(60))).unwrap();
    q.add("bal").unwrap();
    assert_eq!(q.len(), 2);
    assert_eq!(depth(&m), [(0, 2)]);
}

#[tokio::test(start_paused = true)]
async fn delayed_items_come_after_their_time_high_before_low() {
    let (q, m) = queue_with_metrics();
    let start = Instant::now();
    q.add_with("low", at(-100)).unwrap();
    q.add_with("prio", after(Duration::from_secs(1)).priority(0))
        .unwrap();
    assert_eq!(next(&q).await, ("low", -100));
    assert_eq!(next(&q).await, ("prio", 0));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(adds(&m), 2);
    assert_eq!(m.recorded().retries, 1);

    let q = PriorityQueue::new();
    q.add_with("foo", after(Duration::from_secs(1))).unwrap();
    q.add_with("bar", after(Duration::from_millis(200)))
        .unwrap();
    q.settle().await;
    advance(Duration::from_secs(1)).await;
    q.settle().await;
    assert_eq!(next(&q).await, ("bar", 0), "queued by when it became ready");
    assert_eq!(next(&q).await, ("foo", 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_item_added_again_without_delay_is_returned_at_once() {
    let q = PriorityQueue::new();
    let start = Instant::now();
    q.add_with("foo", after(Duration::from_secs(60))).unwrap();
    q.add("foo").unwrap();
    assert_eq!(next(&q).await, ("foo", 0));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(q.waiting_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn high_priority_before_low_for_many_items() {
    for delay in [None, Some(Duration::from_secs(1))] {
        let q = PriorityQueue::new();
        for i in 0..200u32 {
            for p in [10, 5, 0, -5, -10] {
                let mut o = at(p);
                if let Some(d) = delay {
                    o = o.after(d);
                }
                q.add_with((p, i), o).unwrap();
            }
        }
        for p in [10, 5, 0, -5, -10] {
            for i in 0..200u32 {
                let item = timeout(BOUND, q.get())
                    .await
                    .expect("an item within the bound")
                    .unwrap();
                assert_eq!((*item.key(), item.priority()), ((p, i), p));
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limited_adds_of_several_keys_do_not_affect_each_other() {
    let limiter = Arc::new(
        ExponentialRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)).unwrap(),
    );
    for _ in 0..7 {
        limiter.when(&"bar");
    }
    let q: PriorityQueue<&str> = PriorityQueue::builder().rate_limiter(limiter).build();
    let start = Instant::now();
    q.add_rate_limited("foo").unwrap();
    q.add_rate_limited("bar").unwrap();
    assert_eq!(next(&q).await, ("foo", 0));
    assert_eq!(start.elapsed(), Duration::from_millis(5));
    assert_eq!(next(&q).await, ("bar", 0));
    assert_eq!(start.elapsed(), Duration::from_millis(640));
}

#[tokio::test(start_paused = true)]
async fn shutdown_unblocks_gets_and_refuses_adds() {
    let q: PriorityQueue<&str> = PriorityQueue::new();
    let waiting = {
        let q = q.clone();
        tokio::spawn(async move {
            timeout(BOUND, q.get())
                .await
                .expect("a shutdown ends the wait within the bound")
                .is_none()
        })
    };
    tokio::task::yield_now().await;
    q.add("baz").unwrap();
    q.shut_down();
    assert_eq!(
        q.add_with("foo", after(Duration::from_secs(1))),
        Err(AddError::ShutDown("foo"))
    );
    // The waiting get got baz (queued before the shutdown) or returned None; the next get ends.
    let first_none = waiting.await.unwrap();
    if first_none {
        assert_eq!(next(&q).await, ("baz", 0));
    }
    assert!(
        timeout(BOUND, q.get())
            .await
            .expect("a shutdown ends the wait within the bound")
            .is_none()
    );
    assert!(
        timeout(BOUND, q.get())
            .await
            .expect("a shutdown ends the wait within the bound")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_deadlock_when_shut_down_while_handing_out() {
    for round in 0..20u64 {
        let q: PriorityQueue<u64> = PriorityQueue::new();
        let mut tasks = Vec::new();
        for t in 0..20u64 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = t * 7 + round;
                loop {
                    i = i.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let _ = q.add_with(i % 1000, at((i >> 40) as i32 % 100));
                    match q.get().await {
                        Some(item) => item.done(),
                        None => return,
                    }
                }
            }));
        }
        tokio::task::yield_now().await;
        q.shut_down();
        // A real-time bound (this runtime's clock cannot be paused): a lost wake-up fails here.
        for t in tasks {
            timeout(Duration::from_secs(60), t)
                .await
                .expect("every task ends after the shutdown")
                .unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_drain_waits_for_ready_and_processing_items() {
    let q: PriorityQueue<&str> = PriorityQueue::new();
    q.add("a").unwrap();
    let held = got(&q).await;
    q.add("b").unwrap();
    let drain = {
        let q = q.clone();
        tokio::spawn(async move { q.shut_down_with_drain().await })
    };
    sleep(Duration::from_millis(1)).await;
    assert!(!drain.is_finished());
    got(&q).await.done();
    held.done();
    bounded(drain).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn aging_serves_a_low_priority_item_under_a_steady_high_priority_stream() {
    for aging in [None, Some(Duration::from_secs(1))] {
        let mut b = PriorityQueue::builder();
        if let Some(a) = aging {
            b = b.aging(a);
        }
        let q: PriorityQueue<u32> = b.build();
        q.add_with(0, at(0)).unwrap();
        // Every 100 ms a new high-priority key arrives and one key is served.
        let mut served_low_at = None;
        for step in 1..=200u32 {
            q.add_with(step, at(10)).unwrap();
            sleep(Duration::from_millis(100)).await;
            let item = got(&q).await;
            if *item.key() == 0 {
                served_low_at = Some(step);
                break;
            }
        }
        match aging {
            // Without aging the low item starves for the whole stream.
            None => assert_eq!(served_low_at, None),
            // With 1 s per priority, 10 priorities below: served after about 10 s (100 steps).
            Some(_) => {
                let step = served_low_at.expect("aging serves the low item");
                assert!((95..=110).contains(&step), "served at step {step}");
            }
        }
    }
}

#[test]
fn dropping_a_get_loses_nothing() {
    let q: PriorityQueue<u32> = PriorityQueue::new();
    let mut a = task::spawn(q.get());
    let mut b = task::spawn(q.get());
    assert!(a.poll().is_pending());
    assert!(b.poll().is_pending());
    q.add_with(1, at(3)).unwrap();
    drop(a);
    assert!(b.is_woken());
    match b.poll() {
        std::task::Poll::Ready(Some(item)) => assert_eq!((*item.key(), item.priority()), (1, 3)),
        _ => panic!("b must get the key"),
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PriorityQueue<String>>();
    send_sync::<Item<String>>();
    send_sync::<ctrlq_queue_async::futures::Get<'static, String>>();
}

// ----- property test: adds (with priorities), gets, dones, clock steps against a model -----

#[derive(Debug, Clone)]
enum Step {
    Add(u8, i8),
    AddAfter(u8, i8, u8),
    Get,
    Done(usize),
    Tick(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, -2i8..3).prop_map(|(k, p)| Step::Add(k, p)),
        2 => (0u8..6, -2i8..3, 1u8..5).prop_map(|(k, p, d)| Step::AddAfter(k, p, d)),
        3 => Just(Step::Get),
        3 => (0usize..4).prop_map(Step::Done),
        2 => (1u8..6).prop_map(Step::Tick),
    ]
}

/// The model: ready keys with (priority, ready sequence), waiting keys with (deadline ms,
/// priority), processing keys with their dirty priority.
#[derive(Default, Debug)]
struct Model {
    ready: HashMap<u8, (i32, u64)>,
    waiting: HashMap<u8, (u64, i32)>,
    processing: HashMap<u8, Option<(i32, u64)>>,
    seq: u64,
    now: u64,
}

impl Model {
    fn add(&mut self, k: u8, p: i32) {
        if let Some(w) = self.waiting.remove(&k) {
            return self.add(k, p.max(w.1));
        }
        self.seq += 1;
        if let Some(d) = self.processing.get_mut(&k) {
            // Dirty keys keep the place of their re-add; a raise moves them to the back.
            if d.is_none_or(|(x, _)| p > x) {
                *d = Some((p, self.seq));
            }
            return;
        }
        match self.ready.get_mut(&k) {
            Some((cur, s)) => {
                if p > *cur {
                    *cur = p;
                    *s = self.seq;
                }
            }
            None => {
                self.ready.insert(k, (p, self.seq));
            }
        }
    }
    fn add_after(&mut self, k: u8, p: i32, d: u64) {
        // Absorbed by a key that will be handed out without it: ready, or dirty while processing.
        if self.ready.contains_key(&k) || matches!(self.processing.get(&k), Some(Some(_))) {
            return self.add(k, p);
        }
        let deadline = self.now + d;
        let e = self.waiting.entry(k).or_insert((deadline, p));
        e.0 = e.0.min(deadline);
        e.1 = e.1.max(p);
    }
    fn tick(&mut self, d: u64) {
        self.now += d;
        let mut due: Vec<(u64, u8, i32)> = self
            .waiting
            .iter()
            .filter(|(_, (at, _))| *at <= self.now)
            .map(|(k, (at, p))| (*at, *k, *p))
            .collect();
        due.sort_unstable();
        // Keys due at the same instant become ready in an unspecified order: one sequence
        // number for the group, and `pop` accepts any of them.
        let mut last_at = None;
        let mut group = 0;
        for (at, k, p) in due {
            self.waiting.remove(&k);
            if last_at != Some(at) {
                self.seq += 1;
                group = self.seq;
                last_at = Some(at);
            }
            let before = self.ready.get(&k).copied();
            self.add(k, p);
            if let Some(r) = self.ready.get_mut(&k)
                && before != Some(*r)
            {
                r.1 = group; // newly ready (or raised) by this batch
            }
        }
    }
    /// Pops the best key; among keys tied on (priority, sequence), the one `real` names.
    fn pop(&mut self, real: Option<u8>) -> Option<(u8, i32)> {
        let best = self
            .ready
            .values()
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
            .copied()?;
        let k = match real {
            Some(r) if self.ready.get(&r) == Some(&best) => r,
            _ => *self.ready.iter().find(|(_, v)| **v == best)?.0,
        };
        self.ready.remove(&k);
        self.processing.insert(k, None);
        Some((k, best.0))
    }
    fn done(&mut self, k: u8) {
        if let Some(Some(rank)) = self.processing.remove(&k) {
            self.ready.insert(k, rank);
        }
    }
}

#[test]
fn the_priority_queue_behaves_like_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 10_000,
        rng_seed: RngSeed::Fixed(0x5eed_0005),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/priority_model.txt",
        ))),
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(step(), 1..30), |steps| {
            let rt = support::paused_runtime();
            rt.block_on(async {
                let q: PriorityQueue<u8> = PriorityQueue::new();
                let mut model = Model::default();
                let mut held: Vec<Item<u8>> = Vec::new();
                for s in steps {
                    match s {
                        Step::Add(k, p) => {
                            q.add_with(k, at(p.into())).unwrap();
                            model.add(k, p.into());
                        }
                        Step::AddAfter(k, p, d) => {
                            q.add_with(k, at(p.into()).after(Duration::from_millis(d.into())))
                                .unwrap();
                            model.add_after(k, p.into(), d.into());
                        }
                        Step::Get => {
                            let got = match task::spawn(q.get()).poll() {
                                std::task::Poll::Ready(Some(item)) => Some(item),
                                _ => None,
                            };
                            let expected = model.pop(got.as_ref().map(|i| *i.key()));
                            prop_assert_eq!(
                                got.as_ref().map(|i| (*i.key(), i.priority())),
                                expected
                            );
                            held.extend(got);
                        }
                        Step::Done(i) => {
                            if !held.is_empty() {
                                let item = held.remove(i % held.len());
                                model.done(*item.key());
                                item.done();
                            }
                        }
                        Step::Tick(ms) => {
                            q.settle().await;
                            advance(Duration::from_millis(ms.into())).await;
                            q.settle().await;
                            model.tick(ms.into());
                        }
                    }
                    prop_assert_eq!(q.len(), model.ready.len());
                    prop_assert_eq!(q.waiting_len(), model.waiting.len());
                    prop_assert_eq!(q.processing_len(), model.processing.len());
                }
                Ok(())
            })
        })
        .unwrap();
}

/// With aging, a key's enqueue time counts: one added from a plain thread (outside any
/// runtime) is timed by the queue's runtime clock, not the real one.
#[tokio::test(start_paused = true)]
async fn aging_times_an_add_from_a_plain_thread_by_the_queue_runtime_clock() {
    let q: PriorityQueue<&str> = PriorityQueue::builder()
        .aging(Duration::from_secs(1))
        .build();
    // An hour of paused time: the real clock is now an hour behind the queue's.
    advance(Duration::from_secs(3600)).await;
    q.add_with("old", at(0)).unwrap();
    advance(Duration::from_secs(10)).await;
    let handle = q.clone();
    std::thread::spawn(move || handle.add_with("new", at(5)).unwrap())
        .join()
        .expect("a plain thread may add");
    // "old" waited 10 s, worth 10 priorities; "new" is only 5 above it. Timed by the real
    // clock, "new" would look an hour old and go first.
    let first = got(&q).await;
    assert_eq!(*first.key(), "old");
}

/// A queue dropped with keys queued takes them off each priority's depth gauge.
#[tokio::test(start_paused = true)]
async fn a_dropped_queue_takes_its_keys_off_every_priority_depth() {
    let (q, m) = queue_with_metrics();
    q.add_with("a", at(1)).unwrap();
    q.add_with("b", at(1)).unwrap();
    q.add_with("c", at(5)).unwrap();
    q.add_with("b", at(5)).unwrap(); // a raise moves b between the series
    assert_eq!(depth(&m), [(1, 1), (5, 2)]);
    q.shut_down();
    drop(q);
    assert_eq!(depth(&m), [(1, 0), (5, 0)]);
}

// The assertions of the examples `PriorityQueue` had on each method it shares with
// `WorkQueue`; those methods are now documented once, on `Queue`, with work-queue examples.

#[tokio::test(start_paused = true)]
async fn shared_handle_methods_should_behave_on_a_priority_queue() {
    let queue: PriorityQueue<u32> = PriorityQueue::new();
    assert!(queue.is_empty());
    let named: PriorityQueue<u32> = PriorityQueue::builder().name("q").build();
    assert!(named.is_empty());

    let queue = PriorityQueue::new();
    queue.add("a").unwrap();
    queue.add("a").unwrap();
    assert_eq!(queue.len(), 1);
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(queue.processing_len(), 1);
    item.done();
    assert_eq!(queue.processing_len(), 0);
    queue.shut_down();
    assert!(queue.is_shutting_down());
    assert_eq!(queue.add("b"), Err(AddError::ShutDown("b")));

    let queue = PriorityQueue::new();
    queue.add_after("a", Duration::from_secs(1)).unwrap();
    assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    assert_eq!(*bounded(queue.get()).await.unwrap(), "a"); // the paused clock jumps 1 s

    let queue = PriorityQueue::new();
    queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    assert_eq!(queue.num_requeues(&"a"), 1);
    queue.add_rate_limited("a").unwrap();
    assert_eq!(queue.num_requeues(&"a"), 2);
    queue.forget(&"a");
    assert_eq!(queue.num_requeues(&"a"), 0);

    let queue = PriorityQueue::new();
    queue.add("a").unwrap();
    let key = bounded(queue.get()).await.unwrap().into_key();
    queue.add("a").unwrap(); // while processing: queued again at done
    assert_eq!(queue.len(), 0);
    queue.done(&key);
    assert_eq!(queue.len(), 1);

    let queue = PriorityQueue::new();
    queue.add(1).unwrap();
    queue.shut_down();
    assert!(bounded(queue.get()).await.is_some()); // ready before the shutdown
    assert!(bounded(queue.get()).await.is_none());

    let queue = PriorityQueue::new();
    queue.add("a").unwrap();
    let worker = queue.clone();
    tokio::spawn(async move {
        while let Some(item) = worker.get().await {
            item.done()
        }
    });
    timeout(BOUND, queue.shut_down_with_drain()).await.unwrap();
    assert!(queue.is_empty());

    let queue = PriorityQueue::new();
    queue.add_after("a", Duration::from_millis(50)).unwrap();
    advance(Duration::from_millis(50)).await;
    queue.settle().await;
    assert_eq!(queue.len(), 1);
}
