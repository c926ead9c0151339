//! Heap bytes per tracked key stay flat when far more keys pass than the map may hold: about 34
//! bytes per `u64` key for the exponential limiter and 50 for the per-item bucket (an entry of
//! 16 or 24 bytes plus hashbrown's control byte, at a load between 7/16 and 7/8).
//!
//! One test only: the counting allocator is global, so a second test running in parallel in
//! this binary would be counted too.

use std::alloc::System;
use std::time::Duration;

use ctrlq_ratelimit::{ExponentialRateLimiter, ItemBucketRateLimiter, RateLimiter};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// The maps' hash seed. How full a stripe's table is when an eviction's tombstone makes it grow
/// depends on which keys hash to it, so the bytes per key do too; a fixed seed makes the figure
/// the same on every run.
const SEED: u64 = 1;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes per key of the limiter `make` builds for `max_keys`, after `4 × max_keys`
/// distinct keys.
fn bytes_per_key<L: RateLimiter<u64>>(max_keys: usize, make: impl Fn(usize) -> L) -> f64 {
    let region = Region::new(GLOBAL);
    let l = make(max_keys);
    for k in 0..4 * max_keys as u64 {
        l.when(&k);
    }
    let c = region.change();
    let live = c.bytes_allocated as f64 - c.bytes_deallocated as f64;
    drop(l);
    live / max_keys as f64
}

#[test]
fn bytes_per_key_stay_within_the_bound_at_every_size() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let _guard = rt.enter();
    let (ms, s) = (Duration::from_millis(1), Duration::from_secs(1000));
    for max_keys in [1 << 14, 1 << 17] {
        let exp = bytes_per_key(max_keys, |n| {
            ExponentialRateLimiter::with_max_keys(ms, s, n)
                .unwrap()
                .with_hash_seed(SEED)
        });
        assert!((17.0..=35.0).contains(&exp), "exponential: {exp} B per key");
        // Buckets that stay in debt (time stands still), so the idle sweep reclaims none.
        let bucket = bytes_per_key(max_keys, |n| {
            ItemBucketRateLimiter::with_max_keys(s, 1, n)
                .unwrap()
                .with_hash_seed(SEED)
        });
        assert!(
            (25.0..=51.0).contains(&bucket),
            "item bucket: {bucket} B per key"
        );
    }
}
