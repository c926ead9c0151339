//! Criterion benches of the work queues: client-go's `BenchmarkQueue` (100 keys, add → get →
//! done, uncontended), a 10,000-key fifo drain, delayed adds, and the priority queue's
//! add → get → done at 1,000 queued items.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{PriorityQueue, WorkQueue};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn keys(n: usize) -> Vec<Arc<str>> {
    (0..n).map(|i| Arc::from(format!("key-{i}"))).collect()
}

fn work_queue(c: &mut Criterion) {
    let rt = rt();
    let k100 = keys(100);
    c.bench_function("workqueue/add_get_done_100", |b| {
        b.iter_batched(
            WorkQueue::<Arc<str>>::new,
            |q| {
                rt.block_on(async {
                    for k in &k100 {
                        q.add(k.clone()).unwrap();
                        q.get().await.unwrap().done();
                    }
                })
            },
            BatchSize::SmallInput,
        )
    });
    let k10k = keys(10_000);
    c.bench_function("workqueue/fifo_10k", |b| {
        b.iter_batched(
            WorkQueue::<Arc<str>>::new,
            |q| {
                rt.block_on(async {
                    for k in &k10k {
                        q.add(k.clone()).unwrap();
                    }
                    q.shut_down();
                    while let Some(item) = q.get().await {
                        item.done();
                    }
                })
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function("workqueue/add_after_1k", |b| {
        b.iter_batched(
            WorkQueue::<Arc<str>>::new,
            |q| {
                rt.block_on(async {
                    for (i, k) in k10k.iter().take(1000).enumerate() {
                        q.add_after(k.clone(), Duration::from_secs(60 + i as u64))
                            .unwrap();
                    }
                    q.shut_down();
                })
            },
            BatchSize::SmallInput,
        )
    });
}

fn priority_queue(c: &mut Criterion) {
    let rt = rt();
    let q: PriorityQueue<u64> = PriorityQueue::new();
    for i in 0..1000u64 {
        q.add_with(i, AddOptions::default().priority((i % 100) as i32))
            .unwrap();
    }
    let mut next = 1000u64;
    c.bench_function("priority/add_get_done_at_1k", |b| {
        b.iter(|| {
            rt.block_on(async {
                next += 1;
                q.add_with(next, AddOptions::default().priority((next % 100) as i32))
                    .unwrap();
                q.get().await.unwrap().done();
            })
        })
    });
}

criterion_group!(benches, work_queue, priority_queue);
criterion_main!(benches);
