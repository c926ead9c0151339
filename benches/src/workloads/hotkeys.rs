//! `hotkeys`: P producers each add n keys drawn from K (index splitmix64(seed·1000 + p) mod K,
//! pre-generated); workers get → insert the key into a shared in-flight set (already there = a
//! violation) → remove it → done. Producers done → shut down with drain → wait for the workers.
//!
//! Keys are `&'static str` (see `fifo`). The in-flight set is a general concurrent set a user's
//! code would reach for, `dashmap::DashSet`, as the Go peer uses `sync.Map`'s `LoadOrStore` and
//! `Delete`, so both time the same work per item.
//!
//! After the measured run on the workloads' 2-thread runtime, the same run on a 1-thread
//! runtime is reported as `ops_per_sec_1thread` (see `concurrent`), and the floor,
//! `floor_ops_per_sec`: the same run on the same threads through `BareQueue` (`bare.rs`), the Go
//! original's algorithm behind one lock and nothing else: the least a work queue behind one lock
//! does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctrlq_queue_async::WorkQueue;
use dashmap::DashSet;
use tokio::task::JoinHandle;

use super::bare::BareQueue;
use super::fifo::Key;
use crate::common::{
    Extra, Overrides, Params, Report, SplitMix64, cpu_time, runtime_with, threads,
    wake_counts_extra, wake_counts_start, work_queue,
};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let keys = super::fifo::keys(params.keys);
    // Indices into the keys: the plans stay small whatever the key type.
    let plans: Vec<Arc<Vec<u32>>> = (0..params.producers)
        .map(|p| {
            let mut rng = SplitMix64::new(params.seed * 1000 + p);
            Arc::new(
                (0..params.n)
                    .map(|_| (rng.next() % params.keys) as u32)
                    .collect(),
            )
        })
        .collect();
    let keys = Arc::new(keys);
    wake_counts_start();
    let two = measure(&params, &keys, &plans, threads());
    let wakes = wake_counts_extra();
    let one = measure(&params, &keys, &plans, 1);
    let floor = measure_bare(&params, &keys, &plans);
    let adds = (params.producers * params.n) as f64;
    Report {
        workload: "hotkeys",
        params,
        seconds: two.seconds,
        ops_per_sec: adds / two.seconds,
        extra: vec![
            ("ok", Extra::Bool(two.violations == 0 && two.processed > 0)),
            ("cpu_s", Extra::Num(two.cpu_s)),
            ("processed", Extra::Num(two.processed as f64)),
            (
                "adds_per_process",
                Extra::Num(adds / two.processed.max(1) as f64),
            ),
            ("violations", Extra::Num(two.violations as f64)),
            ("ops_per_sec_1thread", Extra::Num(adds / one.seconds)),
            ("floor_ops_per_sec", Extra::Num(adds / floor)),
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
    violations: u64,
}

/// Runs the workload once on a runtime of `threads` worker threads.
fn measure(
    params: &Params,
    keys: &Arc<Vec<Key>>,
    plans: &[Arc<Vec<u32>>],
    threads: usize,
) -> Measured {
    let (params, keys, plans) = (*params, keys.clone(), plans.to_vec());
    let in_flight: Arc<DashSet<Key>> = Arc::new(DashSet::new());
    runtime_with(threads).block_on(async move {
        let queue: WorkQueue<Key> = work_queue();
        let processed = Arc::new(AtomicU64::new(0));
        let violations = Arc::new(AtomicU64::new(0));
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let workers: Vec<_> = (0..params.workers)
            .map(|_| {
                let (queue, processed, violations) =
                    (queue.clone(), processed.clone(), violations.clone());
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    let mut n = 0;
                    while let Some(item) = queue.get().await {
                        if !in_flight.insert(*item.key()) {
                            violations.fetch_add(1, Ordering::Relaxed);
                        }
                        in_flight.remove(item.key());
                        item.done();
                        n += 1;
                    }
                    processed.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        let producers = spawn_producers(&keys, plans, &queue, |q: &WorkQueue<Key>, k| {
            q.add(*k).expect("the queue is open")
        });
        super::fifo::join(producers, "a producer").await;
        queue.shut_down_with_drain().await;
        super::fifo::join(workers, "a worker").await;
        Measured {
            seconds: t0.elapsed().as_secs_f64(),
            cpu_s: (cpu_time() - cpu0).as_secs_f64(),
            processed: processed.load(Ordering::Relaxed),
            violations: violations.load(Ordering::Relaxed),
        }
    })
}

/// Spawns a producer per plan: it adds the keys its plan indexes to `queue` with `add`
/// (generic, so that each queue's add is compiled into the loop).
fn spawn_producers<Q, F>(
    keys: &Arc<Vec<Key>>,
    plans: Vec<Arc<Vec<u32>>>,
    queue: &Q,
    add: F,
) -> Vec<JoinHandle<()>>
where
    Q: Clone + Send + 'static,
    F: Fn(&Q, &Key) + Copy + Send + 'static,
{
    plans
        .into_iter()
        .map(|plan| {
            let (queue, keys) = (queue.clone(), keys.clone());
            tokio::spawn(async move {
                for &i in plan.iter() {
                    add(&queue, &keys[i as usize]);
                }
            })
        })
        .collect()
}

/// The same run through `BareQueue` (`bare.rs`) on the same threads: its seconds.
fn measure_bare(params: &Params, keys: &Arc<Vec<Key>>, plans: &[Arc<Vec<u32>>]) -> f64 {
    let (params, keys, plans) = (*params, keys.clone(), plans.to_vec());
    let in_flight: Arc<DashSet<Key>> = Arc::new(DashSet::new());
    runtime_with(threads()).block_on(async move {
        let queue = Arc::new(BareQueue::new());
        let t0 = Instant::now();
        let workers: Vec<_> = (0..params.workers)
            .map(|_| {
                let (queue, in_flight) = (queue.clone(), in_flight.clone());
                tokio::spawn(async move {
                    while let Some(key) = queue.get().await {
                        assert!(in_flight.insert(key), "the floor handed out a key twice");
                        in_flight.remove(&key);
                        queue.done(&key);
                    }
                })
            })
            .collect();
        let producers = spawn_producers(&keys, plans, &queue, |q: &Arc<BareQueue>, k| q.add(k));
        super::fifo::join(producers, "a producer").await;
        queue.close();
        super::fifo::join(workers, "a worker").await;
        t0.elapsed().as_secs_f64()
    })
}
