//! `fifo`: one task adds keys 0..n−1 into a plain work queue; then the workers start and the
//! queue is shut down; workers loop get → done until get reports shutdown.
//!
//! Keys are [`Key`]s, `&'static str`: immutable, made once per run, copied in two words and
//! never reference-counted, the Rust counterpart of Go's strings. Producers hold their keys and
//! hand the queue a copy of each, as a source hands the queue an owned key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctrlq_queue_async::WorkQueue;
use tokio::task::JoinHandle;

use crate::common::{
    Extra, Overrides, Params, Report, cpu_time, key, runtime, wake_counts_extra, wake_counts_start,
    work_queue,
};

/// A workload's key. Made once per run and never freed (the process ends with its run), so a
/// copy of it costs what a Go string's does, and no reference count is in the timed region.
pub type Key = &'static str;

/// The workload's keys, built before any timer starts.
pub fn keys(n: u64) -> Vec<Key> {
    (0..n)
        .map(|i| &*Box::leak(key(i).into_boxed_str()))
        .collect()
}

/// The same keys as `Arc<str>`, for the workloads that hand the queue a clone only where it
/// keeps one (`delay`, `controller`).
pub fn shared_keys(n: u64) -> Vec<Arc<str>> {
    (0..n).map(|i| Arc::from(key(i))).collect()
}

/// Spawns `workers` tasks that get → done until the queue reports shutdown, then add how many
/// items they processed to `processed`.
pub fn spawn_workers(
    queue: &WorkQueue<Key>,
    workers: u64,
    processed: &Arc<AtomicU64>,
) -> Vec<JoinHandle<()>> {
    (0..workers)
        .map(|_| {
            let (queue, processed) = (queue.clone(), processed.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while let Some(item) = queue.get().await {
                    item.done();
                    n += 1;
                }
                processed.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect()
}

/// Awaits every task; a panic in one (`what` names it) fails the workload.
pub async fn join(tasks: Vec<JoinHandle<()>>, what: &str) {
    for t in tasks {
        if let Err(e) = t.await {
            panic!("{what} panicked: {e}");
        }
    }
}

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let keys = keys(params.n);
    wake_counts_start();
    runtime().block_on(async move {
        let queue: WorkQueue<Key> = work_queue();
        let processed = Arc::new(AtomicU64::new(0));
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        for k in &keys {
            queue.add(*k).expect("the queue is open");
        }
        let add_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let workers = spawn_workers(&queue, params.workers, &processed);
        queue.shut_down();
        join(workers, "a worker").await;
        let drain_s = t1.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        let seconds = add_s + drain_s;
        let processed = processed.load(Ordering::Relaxed);
        Report {
            workload: "fifo",
            params,
            seconds,
            ops_per_sec: 3.0 * params.n as f64 / seconds,
            extra: vec![
                ("ok", Extra::Bool(processed == params.n)),
                ("cpu_s", Extra::Num(cpu_s)),
                ("add_seconds", Extra::Num(add_s)),
                ("drain_seconds", Extra::Num(drain_s)),
            ]
            .into_iter()
            .chain(wake_counts_extra())
            .collect(),
        }
    })
}
