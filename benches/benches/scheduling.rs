//! Criterion benchmarks of the scheduling queue: `sched-pop` (add then pop + done of 100,000
//! items of random priority) and `sched-move` (move 10,000 / 100,000 unschedulable items on one
//! event). Keys are `Arc<str>`. The backoff lateness figure needs real time, so it lives in
//! `wqbench sched-backoff` only.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::common::{SplitMix64, key, runtime};
use benches::workloads::sched_move::{move_once, unschedulable_queue};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};

fn sched_pop(c: &mut Criterion) {
    let rt = runtime();
    let n = 100_000u64;
    let keys: Vec<Arc<str>> = (0..n).map(|i| Arc::from(key(i))).collect();
    let mut rng = SplitMix64::new(1);
    let prios: Vec<i64> = (0..n).map(|_| rng.next() as i64).collect();
    let mut group = c.benchmark_group("sched_pop");
    group.throughput(Throughput::Elements(n));
    group.sample_size(10);
    group.bench_function(BenchmarkId::new("pop_and_done", n), |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let queue =
                        SchedulingQueue::<Arc<str>, i64>::new(SchedulingQueueConfig::default())
                            .expect("valid config");
                    for (k, p) in keys.iter().zip(&prios) {
                        queue.add(k.clone(), *p).unwrap();
                    }
                    let t = Instant::now();
                    for _ in 0..n {
                        let item = queue.pop().await.expect("open");
                        black_box(item.done());
                    }
                    total += t.elapsed();
                }
                total
            })
        });
    });
    group.finish();
}

fn sched_move(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("sched_move");
    group.sample_size(10);
    for n in [10_000usize, 100_000] {
        let keys: Vec<Arc<str>> = (0..n as u64).map(|i| Arc::from(key(i))).collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("move_all", n), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let queue = unschedulable_queue(&keys).await;
                        let (s, ok) = move_once(&queue, n).await;
                        assert!(ok, "every item moved");
                        total += Duration::from_secs_f64(s);
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, sched_pop, sched_move);
criterion_main!(benches);
