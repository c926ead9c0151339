//! Heap bytes per queued key of `ctrlq_queue_core::WorkState` against the naive layout that stores
//! every queued key twice (a FIFO plus a dirty set, as the Go original does).
//!
//! `cargo run --release -p benches --bin core_memory -- [N]` prints one JSON line per layout.
//! Keys are `String`s `"ns-<i % 100>/obj-<i>"`, built inside the measured region, so the figure
//! includes the key's own heap bytes; the naive layout clones each key once for its set.

use std::alloc::System;
use std::collections::{HashSet, VecDeque};

use benches::common::key;
use ctrlq_queue_core::WorkState;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("N must be a whole number"))
        .unwrap_or(1_000_000);

    let region = Region::new(GLOBAL);
    let mut state = WorkState::new();
    for i in 0..n {
        state.add(key(i));
    }
    let once = live_bytes(&region);
    assert_eq!(state.len() as u64, n);
    drop(state);

    let region = Region::new(GLOBAL);
    let mut queue = VecDeque::new();
    let mut dirty = HashSet::new();
    for i in 0..n {
        let k = key(i);
        if dirty.insert(k.clone()) {
            queue.push_back(k);
        }
    }
    let twice = live_bytes(&region);
    assert_eq!(queue.len() as u64, n);

    for (layout, bytes) in [
        ("work_state_key_once", once),
        ("fifo_plus_set_key_twice", twice),
    ] {
        println!(
            "{{\"layout\": \"{layout}\", \"n\": {n}, \"heap_bytes_per_key\": {:.1}}}",
            bytes as f64 / n as f64
        );
    }
}

/// Bytes allocated and still live since `region` started.
fn live_bytes(region: &Region<'_, System>) -> i64 {
    let c = region.change();
    // stats_alloc already adds a realloc's growth to `bytes_allocated` (and its shrink to
    // `bytes_deallocated`); `bytes_reallocated` repeats that delta, so it must not be added.
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}
