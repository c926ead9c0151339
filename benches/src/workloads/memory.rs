//! `memory`: build each of n keys and add it to a work queue (the queue is its only holder);
//! bytes per queued key, keys included, counted two ways.
//!
//! - `heap_bytes_per_item`: as the allocator accounts them, like Go's `HeapAlloc` (which counts
//!   each object rounded up to its size class): the growth of the process's resident memory
//!   while the queue is built, in a fresh process, so every byte the allocator took for the
//!   keys and the queue (its chunk headers and rounding included) is counted once. It is
//!   measured for `String` keys, the type a user holding `"namespace/name"` keys picks, before
//!   anything else runs.
//! - `requested_bytes_per_item*`: the bytes requested from the allocator, from the counting
//!   global allocator that `wqbench` installs, for `String`, `Arc<str>` and `Box<str>` keys, so
//!   the cost of the key's own representation is visible: the queue stores each key once (a
//!   FIFO slot) plus a 4-byte index entry.

use std::alloc::System;
use std::hash::Hash;
use std::sync::Arc;

use queue_async::WorkQueue;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region};

use crate::common::{Extra, Overrides, Params, Report, key, max_rss_bytes, rss_bytes};

fn live_bytes(region: &Region<'_, System>) -> i64 {
    let c = region.change();
    // stats_alloc already adds a realloc's growth to `bytes_allocated` (and its shrink to
    // `bytes_deallocated`); `bytes_reallocated` repeats that delta, so it must not be added.
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}

/// Requested heap bytes per key of a queue holding `n` keys made by `make`, and what `probe`
/// reads while the queue is full.
fn measure<K, T>(n: u64, make: impl Fn(u64) -> K, probe: impl FnOnce() -> T) -> (f64, T)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let region = Region::new(&INSTRUMENTED_SYSTEM);
    let queue: WorkQueue<K> = WorkQueue::new();
    for i in 0..n {
        assert!(queue.add(make(i)).is_ok(), "the queue is open");
    }
    let bytes = live_bytes(&region);
    let probed = probe();
    assert_eq!(queue.len() as u64, n);
    drop(queue);
    (bytes as f64 / n as f64, probed)
}

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let n = params.n;
    let string_key = |i| {
        let mut s = key(i);
        s.shrink_to_fit();
        s
    };
    let t0 = std::time::Instant::now();
    let rss0 = rss_bytes();
    let string = measure(n, string_key, rss_bytes);
    let seconds = t0.elapsed().as_secs_f64();
    let resident = match (rss0, string.1) {
        (Some(before), Some(after)) => after.saturating_sub(before) as f64 / n as f64,
        _ => f64::NAN,
    };
    let string = string.0;
    let arc = measure(n, |i| Arc::<str>::from(key(i)), || ()).0;
    let boxed = measure(n, |i| key(i).into_boxed_str(), || ()).0;
    Report {
        workload: "memory",
        params,
        seconds,
        ops_per_sec: n as f64 / seconds,
        extra: vec![
            // Zero means the counting allocator is not installed (not run through wqbench).
            ("ok", Extra::Bool(arc > 0.0 && resident.is_finite())),
            ("cpu_s", Extra::Num(crate::common::cpu_time().as_secs_f64())),
            ("heap_bytes_per_item", Extra::Num(resident)),
            ("requested_bytes_per_item_string", Extra::Num(string)),
            ("requested_bytes_per_item_arc_str", Extra::Num(arc)),
            ("requested_bytes_per_item_box_str", Extra::Num(boxed)),
            ("max_rss_bytes", Extra::Num(max_rss_bytes() as f64)),
        ],
    }
}
