//! A work queue driven by many workers on a multi-thread runtime: keys come out in the order
//! they were queued, each to one worker at a time, none lost, and the drain waits for the last
//! one. (The model tests in `workqueue_model.rs` check the same rules step by step.)

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_queue_async::WorkQueue;
use tokio::time::timeout;

/// The bound of each whole scenario (real time): ample on a loaded machine, yet a lost key or
/// a lost wake-up fails the test instead of hanging it.
const SCENARIO_BOUND: Duration = Duration::from_secs(60);

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// One producer's keys come out first in, first out: every worker sees its keys in increasing
/// order, and all of them exactly once.
#[test]
fn one_producers_keys_come_out_in_order_to_many_workers() {
    runtime(4).block_on(async {
        let queue: WorkQueue<u32> = WorkQueue::new();
        let n = 20_000u32;
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    while let Some(item) = queue.get().await {
                        seen.push(*item.key());
                    }
                    seen
                })
            })
            .collect();
        for k in 0..n {
            queue.add(k).unwrap();
            if k % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let drained = timeout(SCENARIO_BOUND, queue.shut_down_with_drain()).await;
        assert!(drained.is_ok(), "the drain ended");
        let mut all = Vec::new();
        for worker in workers {
            let seen = timeout(SCENARIO_BOUND, worker)
                .await
                .expect("the worker ended")
                .expect("no panic");
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "a worker saw its keys out of order"
            );
            all.extend(seen);
        }
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>(), "every key once");
    });
}

/// Producers re-add a few hot keys while workers process them: no key is ever held by two
/// workers at once, a key re-added while processed runs again, and every key added ends done.
#[test]
fn hot_keys_are_never_processed_twice_at_once_and_none_is_lost() {
    runtime(4).block_on(async {
        let queue: WorkQueue<u32> = WorkQueue::new();
        let holding = Arc::new(Mutex::new(HashSet::new()));
        let violations = Arc::new(Mutex::new(0u32));
        let processed = Arc::new(Mutex::new(HashSet::new()));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (queue, holding) = (queue.clone(), holding.clone());
                let (violations, processed) = (violations.clone(), processed.clone());
                tokio::spawn(async move {
                    while let Some(item) = queue.get().await {
                        let k = *item.key();
                        if !holding.lock().unwrap().insert(k) {
                            *violations.lock().unwrap() += 1;
                        }
                        tokio::task::yield_now().await;
                        holding.lock().unwrap().remove(&k);
                        processed.lock().unwrap().insert(k);
                        item.done();
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..4u32)
            .map(|p| {
                let queue = queue.clone();
                tokio::spawn(async move {
                    for i in 0..5_000u32 {
                        queue.add((i * 7 + p) % 50).unwrap();
                        if i % 16 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for producer in producers {
            timeout(SCENARIO_BOUND, producer)
                .await
                .expect("the producer ended")
                .expect("no panic");
        }
        let drained = timeout(SCENARIO_BOUND, queue.shut_down_with_drain()).await;
        assert!(drained.is_ok(), "the drain ended");
        assert_eq!((queue.len(), queue.processing_len()), (0, 0));
        for worker in workers {
            timeout(SCENARIO_BOUND, worker)
                .await
                .expect("the worker ended")
                .expect("no panic");
        }
        assert_eq!(*violations.lock().unwrap(), 0, "a key held twice at once");
        assert_eq!(
            *processed.lock().unwrap(),
            (0..50).collect::<HashSet<_>>(),
            "every key added was processed"
        );
    });
}

/// The last key re-added while it is processed is handed out again after its `done` to a
/// worker already waiting.
#[test]
fn a_key_re_added_while_processed_is_handed_out_again() {
    runtime(2).block_on(async {
        let queue: WorkQueue<u32> = WorkQueue::new();
        queue.add(1).unwrap();
        let item = support::soon(queue.get()).await.unwrap();
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.get().await.map(|i| *i.key()) })
        };
        tokio::task::yield_now().await;
        queue.add(1).unwrap();
        assert_eq!(queue.len(), 0, "dirty while processing: not queued yet");
        item.done();
        let got = support::soon(waiter).await.expect("no panic");
        assert_eq!(got, Some(1));
    });
}
