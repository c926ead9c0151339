//! `sched-backoff`: 100,000 items failing with attempts 1..5 (splitmix64); when each reaches
//! active (is popped) versus its exact backoff expiry.
//!
//! Each item fails `a` times in a row with an error (no rejectors), skipping the waits with
//! `activate`, so its last failure leaves it in backoff for `1 s · 2^(a − 1)` (capped at 10 s).
//! Then one consumer pops every item and records `now − (timestamp + backoff)`. Keys are
//! `Arc<str>`. Pop-from-backoff is off, so items reach active only through the expiry timer.

use std::sync::Arc;

use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
use tokio::time::Instant;

use crate::common::{
    Extra, Overrides, Params, Report, SplitMix64, cpu_time, key, percentile, runtime,
};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let keys: Vec<Arc<str>> = (0..params.n).map(|i| Arc::from(key(i))).collect();
    let mut rng = SplitMix64::new(params.seed);
    let attempts: Vec<u64> = (0..params.n).map(|_| 1 + rng.next() % 5).collect();
    runtime().block_on(async move {
        let config = SchedulingQueueConfig::default().pop_from_backoff(false);
        let queue = SchedulingQueue::<Arc<str>, i64>::new(config).expect("valid config");
        let cpu0 = cpu_time();
        let start = Instant::now();
        let mut ok = true;
        for (k, a) in keys.iter().zip(&attempts) {
            queue.add(k.clone(), 0).unwrap();
            for i in 0..*a {
                let item = queue.try_pop().expect("the item just queued");
                ok &= item.key() == k;
                let cycle = queue.scheduling_cycle();
                queue
                    .add_unschedulable_if_not_present(item, cycle)
                    .expect("not queued");
                if i + 1 < *a {
                    queue.activate([k.clone()]);
                }
            }
        }
        let setup_s = start.elapsed().as_secs_f64();
        let consumer = tokio::spawn({
            let queue = queue.clone();
            let n = params.n;
            async move {
                let mut late = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let item = queue.pop().await.expect("the queue is open");
                    let now = Instant::now();
                    let expiry =
                        item.timestamp() + config.backoff_duration(item.consecutive_errors());
                    late.push(now.saturating_duration_since(expiry).as_secs_f64() * 1e3);
                    item.done();
                }
                late
            }
        });
        let mut late = consumer.await.expect("the consumer does not panic");
        let seconds = start.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        late.sort_by(f64::total_cmp);
        let avg = late.iter().sum::<f64>() / late.len().max(1) as f64;
        Report {
            workload: "sched-backoff",
            params,
            seconds,
            ops_per_sec: params.n as f64 / seconds,
            extra: vec![
                (
                    "ok",
                    Extra::Bool(ok && late.len() as u64 == params.n && setup_s < 1.0),
                ),
                ("cpu_s", Extra::Num(cpu_s)),
                ("setup_seconds", Extra::Num(setup_s)),
                (
                    "lateness_ms",
                    Extra::Obj(vec![
                        ("min", late.first().copied().unwrap_or(f64::NAN)),
                        ("p50", percentile(&late, 50.0)),
                        ("p99", percentile(&late, 99.0)),
                        ("max", late.last().copied().unwrap_or(f64::NAN)),
                        ("avg", avg),
                    ]),
                ),
            ],
        }
    })
}
