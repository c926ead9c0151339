//! `when` of the retry limiters: exponential (Go: 160 ns), default controller (Go: 488 ns), the
//! bucket and the per-item bucket, single-threaded and with 2 contending threads; and the
//! per-item maps at capacity (every call a new key evicting another) against below capacity
//! (the same keys, all of which fit).
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use benches::common::key;
use criterion::{Criterion, criterion_group, criterion_main};
use ctrlq_ratelimit::{
    BucketRateLimiter, ExponentialRateLimiter, ItemBucketRateLimiter, RateLimiter,
    default_controller_rate_limiter,
};

const KEYS: usize = 10_000;

fn limiters() -> Vec<(&'static str, Arc<dyn RateLimiter<String>>)> {
    vec![
        (
            "exponential",
            Arc::new(
                ExponentialRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000))
                    .unwrap(),
            ),
        ),
        ("default", Arc::new(default_controller_rate_limiter())),
        (
            "bucket",
            Arc::new(BucketRateLimiter::per_second(10, 100).unwrap()),
        ),
        (
            "item_bucket",
            Arc::new(ItemBucketRateLimiter::per_second(10, 100).unwrap()),
        ),
    ]
}

fn single(c: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS as u64).map(key).collect();
    let mut g = c.benchmark_group("when_1thread");
    for (name, l) in limiters() {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(l.when(&keys[i]))
            })
        });
    }
    g.finish();
}

fn contended(c: &mut Criterion) {
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS as u64).map(key).collect());
    let mut g = c.benchmark_group("when_2threads");
    for (name, l) in limiters() {
        g.bench_function(name, |b| {
            // Time per call of each thread while both run at once.
            b.iter_custom(|iters| {
                let barrier = Arc::new(Barrier::new(2));
                let threads: Vec<_> = (0..2usize)
                    .map(|t| {
                        let (l, keys, barrier) = (l.clone(), keys.clone(), barrier.clone());
                        std::thread::spawn(move || {
                            barrier.wait();
                            let start = Instant::now();
                            for i in 0..iters as usize {
                                black_box(l.when(&keys[(i + t * KEYS / 2) % KEYS]));
                            }
                            start.elapsed()
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().unwrap())
                    .max()
                    .unwrap()
            })
        });
    }
    g.finish();
}

/// Keys cycled through by the capacity group: 100,000, against a bound of 16,384 at capacity.
const CYCLE: u64 = 100_000;
const AT_CAPACITY: usize = 16_384;

fn capacity(c: &mut Criterion) {
    let keys: Vec<String> = (0..CYCLE).map(key).collect();
    let (base, max) = (Duration::from_millis(5), Duration::from_secs(1000));
    let mut g = c.benchmark_group("when_capacity");
    let cases: [(&str, Arc<dyn RateLimiter<String>>); 4] = [
        (
            "exponential_below",
            Arc::new(ExponentialRateLimiter::new(base, max).unwrap()),
        ),
        (
            "exponential_at",
            Arc::new(ExponentialRateLimiter::with_max_keys(base, max, AT_CAPACITY).unwrap()),
        ),
        (
            "item_bucket_below",
            Arc::new(ItemBucketRateLimiter::per_second(10, 100).unwrap()),
        ),
        (
            "item_bucket_at",
            Arc::new(
                ItemBucketRateLimiter::with_max_keys(Duration::from_millis(100), 100, AT_CAPACITY)
                    .unwrap(),
            ),
        ),
    ];
    for (name, l) in cases {
        // Warm: below capacity every key is then tracked; at capacity the map is full.
        for k in &keys {
            l.when(k);
        }
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(l.when(&keys[i]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, single, contended, capacity);
criterion_main!(benches);
