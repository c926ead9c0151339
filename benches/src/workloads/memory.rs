//! `memory`: build each of n keys and add it to a work queue (the queue is its only holder);
//! live heap bytes per queued key, keys included, from the counting global allocator that
//! `wqbench` installs.
//!
//! The reported key type is `Arc<str>` (as in the other workloads); `extra` also gives the
//! figure for `String` and `Box<str>` keys, so the cost of the key's own representation is
//! visible: the queue stores each key once (a FIFO slot) plus a 4-byte index entry.

use std::alloc::System;
use std::hash::Hash;
use std::sync::Arc;

use queue_async::WorkQueue;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region};

use crate::common::{Extra, Overrides, Params, Report, key, max_rss_bytes};

fn live_bytes(region: &Region<'_, System>) -> i64 {
    let c = region.change();
    // stats_alloc already adds a realloc's growth to `bytes_allocated` (and its shrink to
    // `bytes_deallocated`); `bytes_reallocated` repeats that delta, so it must not be added.
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}

/// Heap bytes per key of a queue holding `n` keys made by `make`.
fn measure<K>(n: u64, make: impl Fn(u64) -> K) -> f64
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let region = Region::new(&INSTRUMENTED_SYSTEM);
    let queue: WorkQueue<K> = WorkQueue::new();
    for i in 0..n {
        assert!(queue.add(make(i)).is_ok(), "the queue is open");
    }
    let bytes = live_bytes(&region);
    assert_eq!(queue.len() as u64, n);
    drop(queue);
    bytes as f64 / n as f64
}

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let n = params.n;
    let t0 = std::time::Instant::now();
    let arc = measure(n, |i| Arc::<str>::from(key(i)));
    let seconds = t0.elapsed().as_secs_f64();
    let string = measure(n, |i| {
        let mut s = key(i);
        s.shrink_to_fit();
        s
    });
    let boxed = measure(n, |i| key(i).into_boxed_str());
    Report {
        workload: "memory",
        params,
        seconds,
        ops_per_sec: n as f64 / seconds,
        extra: vec![
            // Zero means the counting allocator is not installed (not run through wqbench).
            ("ok", Extra::Bool(arc > 0.0)),
            ("cpu_s", Extra::Num(crate::common::cpu_time().as_secs_f64())),
            ("heap_bytes_per_item", Extra::Num(arc)),
            ("heap_bytes_per_item_string", Extra::Num(string)),
            ("heap_bytes_per_item_box_str", Extra::Num(boxed)),
            ("max_rss_bytes", Extra::Num(max_rss_bytes() as f64)),
        ],
    }
}
