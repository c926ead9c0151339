//! `priority`: a priority work queue holding n ready items (priorities 0..99, splitmix64), then
//! (1) `workers` tasks together add 200,000 fresh keys (ns per add at that size), and (2)
//! `workers` tasks loop get → done → add the key back at a random priority, 200,000 cycles in
//! all, so the size stays n (ns per get+done+add). Run with `--n 1000` and `--n 1000000`, and
//! `--workers 4` and `--workers 64`, to see growth with size and contention.
//!
//! Keys are `u64` (an id is what a priority-queue user typically has at hand; see `fifo` for
//! string keys).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctrlq_queue_async::PriorityQueue;
use ctrlq_queue_async::priority::AddOptions;

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, runtime};

const OPS: u64 = 200_000;

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let mut rng = SplitMix64::new(params.seed);
    let prios: Vec<i32> = (0..params.n + OPS)
        .map(|_| (rng.next() % 100) as i32)
        .collect();
    let prios = Arc::new(prios);
    runtime().block_on(async move {
        let queue: PriorityQueue<u64> = PriorityQueue::new();
        for i in 0..params.n {
            let _ = queue.add_with(i, AddOptions::default().priority(prios[i as usize]));
        }
        let cpu0 = cpu_time();
        // (1) adds of fresh keys at size n.
        let per = OPS / params.workers;
        let t0 = Instant::now();
        let adders: Vec<_> = (0..params.workers)
            .map(|w| {
                let (queue, prios) = (queue.clone(), prios.clone());
                tokio::spawn(async move {
                    for j in 0..per {
                        let key = params.n + w * per + j;
                        let _ = queue
                            .add_with(key, AddOptions::default().priority(prios[key as usize]));
                    }
                })
            })
            .collect();
        for a in adders {
            a.await.expect("an adder panicked");
        }
        let add_ns = t0.elapsed().as_nanos() as f64 / (per * params.workers) as f64;
        // (2) get → done → add back, keeping the size.
        let cycles = Arc::new(AtomicU64::new(0));
        let t1 = Instant::now();
        let workers: Vec<_> = (0..params.workers)
            .map(|w| {
                let (queue, cycles) = (queue.clone(), cycles.clone());
                tokio::spawn(async move {
                    let mut rng = SplitMix64::new(w);
                    for _ in 0..per {
                        let item = queue.get().await.expect("the queue is open");
                        let key = *item.key();
                        item.done();
                        let _ = queue.add_with(
                            key,
                            AddOptions::default().priority((rng.next() % 100) as i32),
                        );
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.expect("a worker panicked");
        }
        let cycle_s = t1.elapsed().as_secs_f64();
        let cycles = cycles.load(Ordering::Relaxed);
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        let seconds = t0.elapsed().as_secs_f64();
        Report {
            workload: "priority",
            params,
            seconds,
            ops_per_sec: cycles as f64 / cycle_s,
            extra: vec![
                (
                    "ok",
                    Extra::Bool(
                        cycles == per * params.workers
                            && queue.len() as u64 == params.n + per * params.workers,
                    ),
                ),
                ("cpu_s", Extra::Num(cpu_s)),
                ("add_ns", Extra::Num(add_ns)),
                ("get_done_add_ns", Extra::Num(cycle_s * 1e9 / cycles as f64)),
            ],
        }
    })
}
