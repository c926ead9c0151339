//! `delay`: n keys added with delays uniform in [0, 1 s] (splitmix64 mod 1,000,000,001 ns); one
//! consumer measures each key's lateness against its deadline.
//!
//! Keys are `Arc<str>` (see `fifo`); the consumer finds a key's deadline through a read-only
//! index built before the timer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use queue_async::WorkQueue;

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, percentile, runtime};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let keys = super::fifo::keys(params.n);
    let index: Arc<HashMap<Arc<str>, usize>> = Arc::new(
        keys.iter()
            .cloned()
            .enumerate()
            .map(|(i, k)| (k, i))
            .collect(),
    );
    let mut rng = SplitMix64::new(params.seed);
    let delays: Vec<Duration> = (0..params.n)
        .map(|_| Duration::from_nanos(rng.next() % 1_000_000_001))
        .collect();
    runtime().block_on(async move {
        let queue: WorkQueue<Arc<str>> = WorkQueue::new();
        let deadlines = Arc::new(std::sync::Mutex::new(vec![
            None::<tokio::time::Instant>;
            keys.len()
        ]));
        let n = params.n as usize;
        let consumer = {
            let (queue, index, deadlines) = (queue.clone(), index.clone(), deadlines.clone());
            tokio::spawn(async move {
                let mut lateness = Vec::with_capacity(n);
                while lateness.len() < n {
                    let item = queue.get().await.expect("the queue is open");
                    let now = tokio::time::Instant::now();
                    let deadline = deadlines.lock().expect("no panics")[index[item.key()]]
                        .expect("the deadline is stored before the add");
                    lateness.push(now.saturating_duration_since(deadline).as_secs_f64() * 1e3);
                    item.done();
                }
                lateness
            })
        };
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        // The main task runs on the runtime's 2 workers, as Go's main goroutine runs on its 2
        // Ps, not on the thread blocked on the runtime: that third busy thread on 2 cores was
        // preempted by the OS for milliseconds during the burst of adds, and items due then
        // were late by as much (p99 7-16 ms, against 3-4 ms this way, same session). Like any
        // long tokio loop it yields cooperatively (`consume_budget`, every 128 adds or so).
        let producer = tokio::spawn({
            let (queue, deadlines) = (queue.clone(), deadlines.clone());
            async move {
                for (i, (k, d)) in keys.iter().zip(&delays).enumerate() {
                    deadlines.lock().expect("no panics")[i] =
                        Some(tokio::time::Instant::now() + *d);
                    queue.add_after(k.clone(), *d).expect("the queue is open");
                    tokio::task::consume_budget().await;
                }
                t0.elapsed().as_secs_f64()
            }
        });
        let add_s = producer.await.expect("the producer panicked");
        let mut lateness = consumer.await.expect("the consumer panicked");
        let seconds = t0.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        queue.shut_down();
        lateness.sort_by(f64::total_cmp);
        let avg = lateness.iter().sum::<f64>() / lateness.len() as f64;
        Report {
            workload: "delay",
            params,
            seconds,
            ops_per_sec: params.n as f64 / seconds,
            extra: vec![
                ("ok", Extra::Bool(lateness.len() == n)),
                ("cpu_s", Extra::Num(cpu_s)),
                ("add_seconds", Extra::Num(add_s)),
                (
                    "lateness_ms",
                    Extra::Obj(vec![
                        ("min", lateness[0]),
                        ("p50", percentile(&lateness, 50.0)),
                        ("p99", percentile(&lateness, 99.0)),
                        ("max", lateness[lateness.len() - 1]),
                        ("avg", avg),
                    ]),
                ),
            ],
        }
    })
}
