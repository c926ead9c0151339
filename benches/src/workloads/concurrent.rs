//! `concurrent`: workers start; producer p adds its own distinct keys p·n/P … (p+1)·n/P − 1;
//! when all producers return, shut down with drain, then wait for the workers to exit.
//!
//! Keys are `&'static str` (see `fifo`).
//!
//! After the measured run on the workloads' runtime (`--threads`, 2 by default), the same run on a 1-thread
//! runtime is reported as `ops_per_sec_1thread`: the same tasks and queue operations with no
//! cache line moving between cores, which is what the second core costs the queue.
//!
//! Then the floor, `floor_ops_per_sec`: the same run (the same threads, keys, producers and
//! workers, counted the same way) through `BareQueue` (`bare.rs`), the Go original's algorithm
//! behind one lock and nothing else: the least a work queue behind one lock does per key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctrlq_queue_async::WorkQueue;
use tokio::task::JoinHandle;

use super::bare::BareQueue;
use super::fifo::Key;
use crate::common::{
    Extra, Overrides, Params, Report, cpu_time, runtime_with, threads, wake_counts_extra,
    wake_counts_start, work_queue,
};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let keys = Arc::new(super::fifo::keys(params.n));
    wake_counts_start();
    let two = measure(&params, &keys, threads());
    let wakes = wake_counts_extra();
    let one = measure(&params, &keys, 1);
    let floor = measure_bare(&params, &keys);
    Report {
        workload: "concurrent",
        params,
        seconds: two.seconds,
        ops_per_sec: 3.0 * params.n as f64 / two.seconds,
        extra: vec![
            ("ok", Extra::Bool(two.processed == params.n)),
            ("cpu_s", Extra::Num(two.cpu_s)),
            ("items_per_sec", Extra::Num(params.n as f64 / two.seconds)),
            ("processed", Extra::Num(two.processed as f64)),
            (
                "ops_per_sec_1thread",
                Extra::Num(3.0 * params.n as f64 / one.seconds),
            ),
            (
                "floor_ops_per_sec",
                Extra::Num(3.0 * params.n as f64 / floor),
            ),
        ]
        .into_iter()
        .chain(wakes)
        .collect(),
    }
}

/// One timed run.
struct Measured {
    seconds: f64,
    cpu_s: f64,
    processed: u64,
}

/// Runs the workload once on a runtime of `threads` worker threads.
fn measure(params: &Params, keys: &Arc<Vec<Key>>, threads: usize) -> Measured {
    let (params, keys) = (*params, keys.clone());
    runtime_with(threads).block_on(async move {
        let queue: WorkQueue<Key> = work_queue();
        let processed = Arc::new(AtomicU64::new(0));
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let workers = super::fifo::spawn_workers(&queue, params.workers, &processed);
        let producers = spawn_producers(&params, &keys, &queue, |q: &WorkQueue<Key>, k| {
            q.add(*k).expect("the queue is open")
        });
        super::fifo::join(producers, "a producer").await;
        queue.shut_down_with_drain().await;
        super::fifo::join(workers, "a worker").await;
        Measured {
            seconds: t0.elapsed().as_secs_f64(),
            cpu_s: (cpu_time() - cpu0).as_secs_f64(),
            processed: processed.load(Ordering::Relaxed),
        }
    })
}

/// Spawns the producers: producer p adds its own keys p·n/P … (p+1)·n/P − 1 to `queue` with
/// `add` (generic, so that each queue's add is compiled into the loop).
fn spawn_producers<Q, F>(
    params: &Params,
    keys: &Arc<Vec<Key>>,
    queue: &Q,
    add: F,
) -> Vec<JoinHandle<()>>
where
    Q: Clone + Send + 'static,
    F: Fn(&Q, &Key) + Copy + Send + 'static,
{
    let per = params.n / params.producers;
    (0..params.producers)
        .map(|p| {
            let (queue, keys) = (queue.clone(), keys.clone());
            let end = if p + 1 == params.producers {
                params.n
            } else {
                (p + 1) * per
            };
            tokio::spawn(async move {
                for k in &keys[(p * per) as usize..end as usize] {
                    add(&queue, k);
                }
            })
        })
        .collect()
}

/// The same run through `BareQueue` (`bare.rs`) on the same threads: its seconds.
fn measure_bare(params: &Params, keys: &Arc<Vec<Key>>) -> f64 {
    let (params, keys) = (*params, keys.clone());
    runtime_with(threads()).block_on(async move {
        let queue = Arc::new(BareQueue::new());
        let processed = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let workers: Vec<_> = (0..params.workers)
            .map(|_| {
                let (queue, processed) = (queue.clone(), processed.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while let Some(key) = queue.get().await {
                        queue.done(&key);
                        n += 1;
                    }
                    processed.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        let producers = spawn_producers(&params, &keys, &queue, |q: &Arc<BareQueue>, k| q.add(k));
        super::fifo::join(producers, "a producer").await;
        queue.close();
        super::fifo::join(workers, "a worker").await;
        assert_eq!(
            processed.load(Ordering::Relaxed),
            params.n,
            "the floor lost keys"
        );
        t0.elapsed().as_secs_f64()
    })
}
