//! Work queue against models: cancel safety of `get` at every poll point, an exhaustive
//! enumeration of the get / add / done / drop / shut-down wake-up protocol, a property test
//! against a simple model, metrics through the queue, auto traits, the stream and
//! `parallelize_until`.

mod support;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ctrlq_queue_async::Item;
use ctrlq_queue_async::futures::Get;
use ctrlq_queue_async::metrics::testing::RecordingProvider;
use ctrlq_queue_async::{ParallelizeError, WorkQueue, parallelize_until};
use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestRunner};
use support::bounded;
use tokio_test::task;
use tokio_util::sync::CancellationToken;

fn work_queue<K: std::hash::Hash + Eq + Clone + Send + Sync + 'static>() -> WorkQueue<K> {
    WorkQueue::new()
}

// ----- cancel safety -----

/// Items arrive while `get` futures are created, polled and dropped at every point: every key
/// added is handed out exactly once in the end.
#[test]
fn dropping_get_futures_at_every_poll_point_loses_nothing() {
    for drop_after in 0..4usize {
        let queue: WorkQueue<u32> = work_queue();
        let mut handed = Vec::new();
        for key in 0..20u32 {
            // A get that is polled `drop_after` times (registering as a waiter), then dropped.
            let mut doomed = task::spawn(queue.get());
            for _ in 0..drop_after {
                if let std::task::Poll::Ready(item) = doomed.poll() {
                    // It may legitimately win a key queued earlier: then it must be handed out.
                    handed.push(item.unwrap().into_key());
                    break;
                }
            }
            let mut survivor = task::spawn(queue.get());
            let _ = survivor.poll();
            queue.add(key).unwrap();
            drop(doomed);
            // The survivor must have been woken (the dropped get passed its wake-up on).
            if let std::task::Poll::Ready(item) = survivor.poll() {
                handed.push(item.unwrap().into_key());
            }
        }
        queue.shut_down();
        while let std::task::Poll::Ready(Some(item)) = task::spawn(queue.get()).poll() {
            handed.push(item.into_key());
        }
        handed.sort_unstable();
        assert_eq!(
            handed,
            (0..20).collect::<Vec<_>>(),
            "drop_after {drop_after}"
        );
    }
}

#[test]
fn a_woken_get_that_is_dropped_passes_the_wake_up_on() {
    a_woken_get_dropped();
}

fn a_woken_get_dropped() {
    let queue: WorkQueue<u32> = work_queue();
    let mut a = task::spawn(queue.get());
    let mut b = task::spawn(queue.get());
    assert!(a.poll().is_pending());
    assert!(b.poll().is_pending());
    queue.add(1).unwrap();
    // One of them was woken; drop `a` whichever it was.
    let a_woken = a.is_woken();
    drop(a);
    assert!(a_woken || b.is_woken());
    assert!(b.is_woken(), "the wake-up passed to b");
    match b.poll() {
        std::task::Poll::Ready(Some(item)) => assert_eq!(*item, 1),
        other => panic!(
            "b must get the key, got {:?}",
            other.map(|o| o.map(Item::into_key))
        ),
    }
}

// ----- exhaustive wake-up protocol -----

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Create a get future (slot i) and poll it.
    Get(usize),
    /// Poll get i again (if it was woken).
    Poll(usize),
    /// Drop get i.
    Drop(usize),
    /// Add key k.
    Add(u32),
    /// Add keys 2 and 3 in one batch.
    AddTwo,
    /// Mark done the oldest handed-out item.
    Done,
    ShutDown,
}

const OPS: [Op; 9] = [
    Op::Get(0),
    Op::Get(1),
    Op::Poll(0),
    Op::Poll(1),
    Op::Drop(0),
    Op::Add(1),
    Op::AddTwo,
    Op::Done,
    Op::ShutDown,
];

/// Every sequence of 6 operations over two get futures: after each step, no queued key is left
/// while a registered get sleeps un-woken (no lost wake-up, also when one batch queues two), no
/// key is handed out twice at once, and in the end every added key was handed out.
#[test]
fn every_interleaving_of_six_operations_keeps_the_protocol() {
    let mut seq = [0usize; 6];
    let mut runs = 0;
    loop {
        run_sequence(&seq.map(|i| OPS[i]));
        runs += 1;
        // Next sequence in base OPS.len().
        let mut i = 0;
        loop {
            if i == seq.len() {
                assert_eq!(runs, OPS.len().pow(6));
                return;
            }
            seq[i] += 1;
            if seq[i] < OPS.len() {
                break;
            }
            seq[i] = 0;
            i += 1;
        }
    }
}

fn run_sequence(ops: &[Op]) {
    type Pending<'a> = Option<task::Spawn<Get<'a, u32>>>;
    let queue: WorkQueue<u32> = work_queue();
    let mut gets: [Pending<'_>; 2] = [None, None];
    let mut held: VecDeque<Item<u32>> = VecDeque::new();
    let mut added = HashSet::new();
    let mut handed = HashSet::new();
    let mut closed = false;
    let take =
        |out: Option<Item<u32>>, held: &mut VecDeque<Item<u32>>, handed: &mut HashSet<u32>| {
            if let Some(item) = out {
                assert!(
                    !held.iter().any(|h| h.key() == item.key()),
                    "{ops:?}: key {} handed out twice at once",
                    item.key()
                );
                handed.insert(*item.key());
                held.push_back(item);
            }
        };
    for &op in ops {
        match op {
            Op::Get(i) => {
                if gets[i].is_none() {
                    let mut g = task::spawn(queue.get());
                    match g.poll() {
                        std::task::Poll::Ready(out) => take(out, &mut held, &mut handed),
                        std::task::Poll::Pending => gets[i] = Some(g),
                    }
                }
            }
            Op::Poll(i) => {
                if let Some(g) = &mut gets[i]
                    && let std::task::Poll::Ready(out) = g.poll()
                {
                    gets[i] = None;
                    take(out, &mut held, &mut handed);
                }
            }
            Op::Drop(i) => gets[i] = None,
            Op::Add(k) => {
                if queue.add(k).is_ok() {
                    added.insert(k);
                } else {
                    assert!(closed);
                }
            }
            Op::AddTwo => {
                if queue.add_all([2, 3]).is_ok() {
                    added.extend([2, 3]);
                } else {
                    assert!(closed);
                }
            }
            Op::Done => drop(held.pop_front()),
            Op::ShutDown => {
                queue.shut_down();
                closed = true;
            }
        }
        // No lost wake-up: while keys are queued, as many sleeping registered gets as there are
        // queued keys (or all of them) must have been woken; once closed, all of them.
        let sleeping: Vec<_> = gets.iter().flatten().collect();
        if (!queue.is_empty() || closed) && !sleeping.is_empty() {
            let woken = sleeping.iter().filter(|g| g.is_woken()).count();
            let needed = if closed { sleeping.len() } else { queue.len() };
            assert!(woken >= needed.min(sleeping.len()), "{ops:?}: lost wake-up");
        }
    }
    // Drain: every added key is eventually handed out.
    drop(gets);
    held.clear();
    queue.shut_down();
    while let std::task::Poll::Ready(Some(item)) = task::spawn(queue.get()).poll() {
        handed.insert(item.into_key());
    }
    assert!(added.is_subset(&handed), "{ops:?}: a key was lost");
}

// ----- property test against a model -----

#[derive(Debug, Clone)]
enum Step {
    /// Add a key, by value or (true) by reference.
    Add(u8),
    /// Add these keys in one batch.
    AddAll(Vec<u8>),
    Get,
    Done(usize),
    ShutDown,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6).prop_map(Step::Add),
        1 => proptest::collection::vec(0u8..6, 0..4).prop_map(Step::AddAll),
        3 => Just(Step::Get),
        3 => (0usize..4).prop_map(Step::Done),
        1 => Just(Step::ShutDown),
    ]
}

/// The model: a FIFO of distinct keys, a processing set, a dirty-while-processing set.
#[derive(Default)]
struct Model {
    fifo: VecDeque<u8>,
    processing: Vec<u8>,
    dirty: HashSet<u8>,
    shut: bool,
}

#[test]
fn the_queue_behaves_like_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 10_000,
        rng_seed: RngSeed::Fixed(0x5eed_0004),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/workqueue_model.txt",
        ))),
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(step(), 1..40), |steps| {
            let queue: WorkQueue<u8> = work_queue();
            let mut model = Model::default();
            let mut held: Vec<Item<u8>> = Vec::new();
            for s in steps {
                match s {
                    Step::Add(k) => {
                        let r = queue.add(k);
                        if model.shut {
                            prop_assert!(r.is_err());
                        } else {
                            prop_assert!(r.is_ok());
                            if model.processing.contains(&k) {
                                model.dirty.insert(k);
                            } else if !model.fifo.contains(&k) {
                                model.fifo.push_back(k);
                            }
                        }
                    }
                    Step::AddAll(keys) => {
                        let r = queue.add_all(keys.clone());
                        if model.shut {
                            prop_assert_eq!(r.map_err(|e| e.into_key()), Err(keys));
                        } else {
                            prop_assert!(r.is_ok());
                            for k in keys {
                                if model.processing.contains(&k) {
                                    model.dirty.insert(k);
                                } else if !model.fifo.contains(&k) {
                                    model.fifo.push_back(k);
                                }
                            }
                        }
                    }
                    Step::Get => {
                        let got = match task::spawn(queue.get()).poll() {
                            std::task::Poll::Ready(out) => Some(out),
                            std::task::Poll::Pending => None,
                        };
                        match model.fifo.pop_front() {
                            Some(k) => {
                                let item = got.flatten();
                                prop_assert_eq!(item.as_ref().map(|i| *i.key()), Some(k));
                                model.processing.push(k);
                                held.extend(item);
                            }
                            None if model.shut => prop_assert!(matches!(got, Some(None))),
                            None => prop_assert!(got.is_none()),
                        }
                    }
                    Step::Done(i) => {
                        if !held.is_empty() {
                            let item = held.remove(i % held.len());
                            let k = *item.key();
                            item.done();
                            model.processing.retain(|p| *p != k);
                            if model.dirty.remove(&k) {
                                model.fifo.push_back(k);
                            }
                        }
                    }
                    Step::ShutDown => {
                        queue.shut_down();
                        model.shut = true;
                    }
                }
                prop_assert_eq!(queue.len(), model.fifo.len());
                prop_assert_eq!(queue.processing_len(), model.processing.len());
                prop_assert_eq!(queue.is_shutting_down(), model.shut);
            }
            Ok(())
        })
        .unwrap();
}

// ----- delayed adds against a model -----

#[derive(Debug, Clone)]
enum Timed {
    /// `add_after(key, n quarters of a millisecond)`; 0 adds now.
    AddAfter(u8, u64),
    Add(u8),
    /// Advance the paused clock by this many quarters of a millisecond, then let the timer task
    /// catch up.
    Advance(u64),
    /// Get and finish every queued key.
    Drain,
}

const QUARTER_MS: Duration = Duration::from_micros(250);

fn timed() -> impl Strategy<Value = Timed> {
    prop_oneof![
        5 => (0u8..8, 0u64..24).prop_map(|(k, q)| Timed::AddAfter(k, q)),
        2 => (0u8..8).prop_map(Timed::Add),
        3 => (0u64..16).prop_map(Timed::Advance),
        2 => Just(Timed::Drain),
    ]
}

/// The delaying queue's model: waiting keys with their deadline (in quarters of a millisecond:
/// off tokio's millisecond grid as often as on it) and order; at each instant
/// the keys due are added by deadline, then order; an add now cancels the wait; a key waiting
/// keeps its earlier deadline.
#[derive(Default)]
struct TimedModel {
    now: u64,
    seq: u64,
    waiting: std::collections::HashMap<u8, (u64, u64)>,
    fifo: VecDeque<u8>,
}

impl TimedModel {
    fn add(&mut self, k: u8) {
        self.waiting.remove(&k);
        if !self.fifo.contains(&k) {
            self.fifo.push_back(k);
        }
    }

    fn add_after(&mut self, k: u8, q: u64) {
        if q == 0 {
            return self.add(k);
        }
        let at = self.now + q;
        if self.waiting.get(&k).is_some_and(|&(w, _)| w <= at) {
            return;
        }
        self.seq += 1;
        self.waiting.insert(k, (at, self.seq));
    }

    fn advance(&mut self, q: u64) {
        self.now += q;
        let mut due: Vec<(u64, u64, u8)> = self
            .waiting
            .iter()
            .filter(|(_, (at, _))| *at <= self.now)
            .map(|(k, (at, seq))| (*at, *seq, *k))
            .collect();
        due.sort_unstable();
        for (_, _, k) in due {
            self.add(k);
        }
    }
}

/// Random delayed adds, adds, clock advances and drains under paused time: the queue holds the
/// model's keys in the model's order, and waits for the model's keys, after every step. So a
/// key is never added before its deadline, and a `settle` adds every key due, whatever tokio's
/// timer grid.
#[test]
fn delayed_adds_behave_like_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        rng_seed: RngSeed::Fixed(0x5eed_0005),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/workqueue_timed_model.txt",
        ))),
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(timed(), 1..40), |steps| {
            let runtime = support::paused_runtime();
            runtime.block_on(async {
                let queue: WorkQueue<u8> = work_queue();
                let mut model = TimedModel::default();
                for s in steps {
                    match s {
                        Timed::AddAfter(k, q) => {
                            queue.add_after(k, QUARTER_MS * q as u32).unwrap();
                            model.add_after(k, q);
                        }
                        Timed::Add(k) => {
                            queue.add(k).unwrap();
                            model.add(k);
                        }
                        Timed::Advance(q) => {
                            tokio::time::advance(QUARTER_MS * q as u32).await;
                            queue.settle().await;
                            model.advance(q);
                        }
                        Timed::Drain => {
                            let mut got = Vec::new();
                            for _ in 0..queue.len() {
                                let item = bounded(queue.get()).await.unwrap();
                                got.push(*item.key());
                                item.done();
                            }
                            let want: Vec<u8> = model.fifo.drain(..).collect();
                            prop_assert_eq!(got, want);
                        }
                    }
                    prop_assert_eq!(queue.len(), model.fifo.len());
                    prop_assert_eq!(queue.waiting_len(), model.waiting.len());
                }
                Ok(())
            })
        })
        .unwrap();
}

// ----- metrics through the queue (client-go's TestMetrics) -----

#[tokio::test(start_paused = true)]
async fn client_go_metrics_through_the_queue() {
    let p = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<&str> = WorkQueue::builder().name("test").metrics(p.clone()).build();
    queue.add("foo").unwrap();
    let seen = p.recorded();
    assert_eq!((seen.adds, seen.depth[&None]), (1, 1));
    tokio::time::advance(Duration::from_micros(50)).await;
    let item = bounded(queue.get()).await.unwrap();
    assert_eq!(p.recorded().queue_durations, [5e-5]);
    for _ in 0..5 {
        queue.add("foo").unwrap();
    }
    let seen = p.recorded();
    assert_eq!((seen.adds, seen.depth[&None]), (2, 1));
    tokio::time::advance(Duration::from_micros(25)).await;
    item.done();
    assert_eq!(p.recorded().work_durations, [2.5e-5]);
    assert_eq!(p.recorded().depth[&None], 1);
    let item = bounded(queue.get()).await.unwrap();
    let got_at = tokio::time::Instant::now();
    assert_eq!(
        p.recorded().queue_durations,
        [5e-5, 2.5e-5],
        "measured from the re-add"
    );
    // The gauges refresh every 500 ms: 1.2 s later the last refresh saw the one item running
    // for between 0.7 s and 1.2 s, and both gauges agree (one item in flight).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let seen = p.recorded();
    assert!(
        (0.7..=1.2).contains(&seen.unfinished_work_seconds),
        "{seen:?}"
    );
    assert_eq!(
        seen.longest_running_processor_seconds,
        seen.unfinished_work_seconds
    );
    let ran = got_at.elapsed().as_secs_f64();
    item.done();
    assert_eq!(p.recorded().work_durations.last(), Some(&ran));
    queue.add_after("bar", Duration::from_millis(1)).unwrap();
    assert_eq!(p.recorded().retries, 1);
}

/// The metrics speak for the whole queue: depth counts every key, the refresh sums every item
/// in progress, and the gauges go to 0 when the last item in progress is done, not before.
#[tokio::test(start_paused = true)]
async fn the_metrics_report_for_the_whole_queue() {
    let p = Arc::new(RecordingProvider::default());
    let queue: WorkQueue<u32> = WorkQueue::builder().name("test").metrics(p.clone()).build();
    for k in 0..16 {
        queue.add(k).unwrap();
    }
    assert_eq!(p.recorded().depth[&None], 16);
    let mut items = Vec::new();
    for _ in 0..16 {
        items.push(bounded(queue.get()).await.unwrap());
    }
    assert_eq!(p.recorded().depth[&None], 0);
    // Refreshed at 0.5 s and 1 s: sixteen items, each 1 s in progress.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let seen = p.recorded();
    assert_eq!(seen.unfinished_work_seconds, 16.0, "{seen:?}");
    assert_eq!(seen.longest_running_processor_seconds, 1.0);
    let last = items.pop().unwrap();
    for item in items {
        item.done();
        assert_eq!(p.recorded().unfinished_work_seconds, 16.0, "one still runs");
    }
    last.done();
    let seen = p.recorded();
    assert_eq!(
        (
            seen.unfinished_work_seconds,
            seen.longest_running_processor_seconds
        ),
        (0.0, 0.0)
    );
    assert_eq!(seen.work_durations.len(), 16);
}

// ----- auto traits -----

#[test]
fn handles_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    fn unpin<T: Unpin>() {}
    send_sync::<WorkQueue<String>>();
    send_sync::<Item<String>>();
    send_sync::<ctrlq_queue_async::WorkQueueBuilder<String>>();
    send::<Get<'static, String>>();
    send_sync::<Get<'static, String>>();
    unpin::<WorkQueue<String>>();
    unpin::<Item<String>>();
    send_sync::<ParallelizeError>();
}

// ----- stream -----

#[tokio::test(start_paused = true)]
async fn the_stream_keeps_exclusion_and_ends_at_shutdown() {
    let queue: WorkQueue<u32> = WorkQueue::new();
    for k in [1, 2, 1, 3] {
        queue.add(k).unwrap();
    }
    let mut stream = Box::pin(queue.stream());
    let first = bounded(stream.next()).await.unwrap();
    queue.add(1).unwrap(); // while processing
    let mut rest = Vec::new();
    let second = bounded(stream.next()).await.unwrap();
    let third = bounded(stream.next()).await.unwrap();
    rest.push(*second.key());
    rest.push(*third.key());
    assert_eq!(rest, [2, 3]);
    drop(first); // done: 1 comes back
    queue.shut_down();
    let tail: Vec<u32> = bounded(stream.map(Item::into_key).collect()).await;
    assert_eq!(tail, [1]);
}

// ----- parallelize_until -----

async fn each_piece_once(pieces: usize, workers: usize, chunk: usize) {
    let seen: Arc<Vec<AtomicU32>> = Arc::new((0..pieces).map(|_| AtomicU32::new(0)).collect());
    let s = seen.clone();
    parallelize_until(
        workers,
        pieces,
        chunk,
        &CancellationToken::new(),
        move |p| {
            let s = s.clone();
            async move {
                s[p].fetch_add(1, Ordering::Relaxed);
            }
        },
    )
    .await
    .unwrap();
    assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallelize_covers_every_piece_once() {
    for (pieces, workers, chunk) in [
        (1000, 10, 1),
        (1000, 10, 10),
        (1000, 10, 100),
        (999, 10, 13),
    ] {
        each_piece_once(pieces, workers, chunk).await;
    }
}

#[tokio::test]
async fn parallelize_refuses_zero_workers_or_chunk() {
    let cancel = CancellationToken::new();
    let nothing = |_| async {};
    assert_eq!(
        parallelize_until(0, 10, 1, &cancel, nothing).await,
        Err(ParallelizeError::ZeroWorkers)
    );
    assert_eq!(
        parallelize_until(2, 10, 0, &cancel, nothing).await,
        Err(ParallelizeError::ZeroChunkSize)
    );
    assert_eq!(parallelize_until(2, 0, 1, &cancel, nothing).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn parallelize_stops_between_pieces_when_cancelled() {
    let cancel = CancellationToken::new();
    let done = Arc::new(AtomicU32::new(0));
    let running = Arc::new(AtomicU32::new(0));
    let max_running = Arc::new(AtomicU32::new(0));
    let (d, c, r, m) = (
        done.clone(),
        cancel.clone(),
        running.clone(),
        max_running.clone(),
    );
    parallelize_until(3, 100, 1, &cancel, move |_| {
        let (d, c, r, m) = (d.clone(), c.clone(), r.clone(), m.clone());
        async move {
            let now = r.fetch_add(1, Ordering::Relaxed) + 1;
            m.fetch_max(now, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
            r.fetch_sub(1, Ordering::Relaxed);
            if d.fetch_add(1, Ordering::Relaxed) + 1 == 10 {
                c.cancel();
            }
        }
    })
    .await
    .unwrap();
    let n = done.load(Ordering::Relaxed);
    assert!((10..=12).contains(&n), "stopped soon after the cancel: {n}");
    assert_eq!(
        max_running.load(Ordering::Relaxed),
        3,
        "at most 3 at a time"
    );
}
