//! `concurrent`: workers start; producer p adds its own distinct keys p·n/P … (p+1)·n/P − 1;
//! when all producers return, shut down with drain, then wait for the workers to exit.
//!
//! Keys are `Arc<str>` (see `fifo`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use queue_async::WorkQueue;

use crate::common::{Extra, Overrides, Params, Report, cpu_time, runtime};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let keys = Arc::new(super::fifo::keys(params.n));
    runtime().block_on(async move {
        let queue: WorkQueue<Arc<str>> = WorkQueue::new();
        let processed = Arc::new(AtomicU64::new(0));
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let workers = super::fifo::spawn_workers(&queue, params.workers, &processed);
        let per = params.n / params.producers;
        let producers: Vec<_> = (0..params.producers)
            .map(|p| {
                let (queue, keys) = (queue.clone(), keys.clone());
                let end = if p + 1 == params.producers {
                    params.n
                } else {
                    (p + 1) * per
                };
                tokio::spawn(async move {
                    for k in &keys[(p * per) as usize..end as usize] {
                        queue.add_ref(k).expect("the queue is open");
                    }
                })
            })
            .collect();
        super::fifo::join(producers, "a producer").await;
        queue.shut_down_with_drain().await;
        super::fifo::join(workers, "a worker").await;
        let seconds = t0.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        let processed = processed.load(Ordering::Relaxed);
        Report {
            workload: "concurrent",
            params,
            seconds,
            ops_per_sec: 3.0 * params.n as f64 / seconds,
            extra: vec![
                ("ok", Extra::Bool(processed == params.n)),
                ("cpu_s", Extra::Num(cpu_s)),
                ("items_per_sec", Extra::Num(params.n as f64 / seconds)),
                ("processed", Extra::Num(processed as f64)),
            ],
        }
    })
}
