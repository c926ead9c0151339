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
//! - `keys_alone_heap_bytes_per_item`: the floor under the first figure, measured the same way in
//!   a child process (`wqbench memory-keys`): the growth of resident memory while the same `String`
//!   keys are built into a `Vec` of exactly n slots and nothing else. What the queue adds on top is
//!   `queue_heap_bytes_per_item`.

use std::alloc::System;
use std::hash::Hash;
use std::sync::Arc;

use ctrlq_queue_async::WorkQueue;
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

/// The `memory-keys` floor: resident-memory growth per key of the keys alone, in a `Vec`.
pub fn run_keys_alone(flags: &Overrides) -> Report {
    let params = flags.resolve(Params::defaults());
    let t0 = std::time::Instant::now();
    let rss0 = rss_bytes();
    let mut keys = Vec::with_capacity(params.n as usize);
    for i in 0..params.n {
        let mut s = key(i);
        s.shrink_to_fit();
        keys.push(s);
    }
    let per_key = match (rss0, rss_bytes()) {
        (Some(before), Some(after)) => after.saturating_sub(before) as f64 / params.n as f64,
        _ => f64::NAN,
    };
    let seconds = t0.elapsed().as_secs_f64();
    assert_eq!(std::hint::black_box(&keys).len() as u64, params.n);
    Report {
        workload: "memory-keys",
        params,
        seconds,
        ops_per_sec: params.n as f64 / seconds,
        extra: vec![
            ("ok", Extra::Bool(per_key.is_finite())),
            ("heap_bytes_per_item", Extra::Num(per_key)),
        ],
    }
}

/// Runs `wqbench memory-keys` with the same n in a fresh process and reads its figure.
fn keys_alone_in_child(n: u64) -> f64 {
    let exe = std::env::current_exe().expect("the bench binary knows its path");
    let out = std::process::Command::new(exe)
        .args(["memory-keys", "--n", &n.to_string()])
        .output()
        .expect("the bench binary can run itself");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = "\"heap_bytes_per_item\":";
    text.find(field)
        .map(|at| &text[at + field.len()..])
        .and_then(|rest| rest.split([',', '}']).next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
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
    let keys_alone = keys_alone_in_child(n);
    Report {
        workload: "memory",
        params,
        seconds,
        ops_per_sec: n as f64 / seconds,
        extra: vec![
            // Zero means the counting allocator is not installed (not run through wqbench).
            (
                "ok",
                Extra::Bool(arc > 0.0 && resident.is_finite() && keys_alone.is_finite()),
            ),
            ("cpu_s", Extra::Num(crate::common::cpu_time().as_secs_f64())),
            ("heap_bytes_per_item", Extra::Num(resident)),
            ("keys_alone_heap_bytes_per_item", Extra::Num(keys_alone)),
            (
                "queue_heap_bytes_per_item",
                Extra::Num(resident - keys_alone),
            ),
            ("requested_bytes_per_item_string", Extra::Num(string)),
            ("requested_bytes_per_item_arc_str", Extra::Num(arc)),
            ("requested_bytes_per_item_box_str", Extra::Num(boxed)),
            ("max_rss_bytes", Extra::Num(max_rss_bytes() as f64)),
        ],
    }
}
