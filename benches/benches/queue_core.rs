//! queue-core: keyed heap add / pop / update / delete at 1,000, 100,000 and 1,000,000 entries,
//! and the work-state add + pop + done round trip.
//!
//! Keys are `u64` (the structure's own cost; string keys add their hashing and comparison).
//! Each measured step keeps the heap at its size: add + pop, update of a random key,
//! delete + re-add of a random key.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use benches::common::{SplitMix64, key};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ctrlq_queue_core::{KeyedHeap, PopOutcome, WorkState};

const SIZES: [u64; 3] = [1_000, 100_000, 1_000_000];

fn filled(n: u64, rng: &mut SplitMix64) -> KeyedHeap<u64, u64> {
    let mut heap = KeyedHeap::with_capacity(ctrlq_queue_core::MinOrder, n as usize + 1);
    for k in 0..n {
        heap.add(k, rng.next());
    }
    heap
}

fn keyed_heap(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_heap");
    for n in SIZES {
        let mut rng = SplitMix64::new(n);
        let mut heap = filled(n, &mut rng);
        let mut next_key = n;
        group.bench_function(BenchmarkId::new("add_then_pop", n), |b| {
            b.iter(|| {
                heap.add(next_key, rng.next());
                next_key += 1;
                black_box(heap.pop())
            })
        });
        let live: Vec<u64> = heap.iter().map(|(k, _)| *k).collect();
        group.bench_function(BenchmarkId::new("update", n), |b| {
            b.iter(|| {
                let k = live[(rng.next() % n) as usize];
                let v = rng.next();
                black_box(heap.update(&k, |x| *x = v))
            })
        });
        group.bench_function(BenchmarkId::new("delete_then_add", n), |b| {
            b.iter(|| {
                let k = live[(rng.next() % n) as usize];
                let (k, v) = heap.delete(&k).expect("every live key is present");
                heap.add(k, v ^ 1);
            })
        });
    }
    group.finish();
}

fn work_state(c: &mut Criterion) {
    let mut group = c.benchmark_group("work_state");
    let keys: Vec<String> = (0..1_000).map(key).collect();
    let mut state = WorkState::new();
    let mut i = 0usize;
    group.bench_function("add_pop_done_string_key", |b| {
        b.iter(|| {
            state.add(keys[i % keys.len()].clone());
            i += 1;
            match state.pop() {
                PopOutcome::Item(k) => black_box(state.done(&k)),
                _ => unreachable!("an item was just added"),
            }
        })
    });
    let mut n = 0u64;
    let mut state = WorkState::new();
    group.bench_function("add_pop_done_u64_key", |b| {
        b.iter(|| {
            state.add(n);
            n += 1;
            match state.pop() {
                PopOutcome::Item(k) => black_box(state.done(&k)),
                _ => unreachable!("an item was just added"),
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = keyed_heap, work_state
}
criterion_main!(benches);
