//! `sched-pop`: a scheduling queue with 100,000 items of random priority (splitmix64): add all,
//! then pop all (each pop followed by `done`, as a scheduler does).
//!
//! Keys are `Arc<str>` (cheap to clone: the queue keeps the key in its heap index, in the item
//! and in the in-flight record); the data is the priority, an `i64`.

use std::sync::Arc;
use std::time::Instant;

use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, key, runtime};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let keys: Vec<Arc<str>> = (0..params.n).map(|i| Arc::from(key(i))).collect();
    let mut rng = SplitMix64::new(params.seed);
    let prios: Vec<i64> = (0..params.n).map(|_| rng.next() as i64).collect();
    runtime().block_on(async move {
        let queue = SchedulingQueue::<Arc<str>, i64>::new(SchedulingQueueConfig::default())
            .expect("valid config");
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        for (k, p) in keys.iter().zip(&prios) {
            queue.add(k.clone(), *p).unwrap();
        }
        let add_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut last = i64::MAX;
        let mut ordered = true;
        let mut popped = 0u64;
        while popped < params.n {
            let item = queue.pop().await.expect("the queue is open");
            ordered &= *item.data() <= last;
            last = *item.data();
            item.done();
            popped += 1;
        }
        let pop_s = t1.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        let n = params.n as f64;
        Report {
            workload: "sched-pop",
            params,
            seconds: add_s + pop_s,
            ops_per_sec: n / pop_s,
            extra: vec![
                ("ok", Extra::Bool(ordered && queue.is_empty())),
                ("cpu_s", Extra::Num(cpu_s)),
                ("pops_per_sec", Extra::Num(n / pop_s)),
                ("adds_per_sec", Extra::Num(n / add_s)),
                ("add_seconds", Extra::Num(add_s)),
                ("pop_seconds", Extra::Num(pop_s)),
            ],
        }
    })
}
