//! A full per-item map evicts keys that stopped failing, not keys that keep failing.
//!
//! The scenario: a map of 16,384 keys filled with 100,000 keys seen once, then 64 keys failing
//! 40 times each with 64 new keys after every failure (a quarter of the map's capacity between
//! two failures of one key). A failure that finds its key evicted restarts the key's backoff (the
//! exponential returns `base` again, the bucket has its burst again): the hot loop the bound
//! exists to prevent. At most 1 % of those failures may be reset.

use std::time::Duration;

use ctrlq_ratelimit::{
    ExponentialRateLimiter, FastSlowRateLimiter, ItemBucketRateLimiter, RateLimiter,
};

/// The eviction tests' hash seed: which keys a full map evicts depends on it, so each test sees
/// the same evictions on every run.
const SEED: u64 = 1;
const CAPACITY: usize = 16_384;
const FILL: u64 = 100_000;
const HOT: u64 = 64;
const FAILURES: u32 = 40;
const NEW_BETWEEN: u64 = 64;
/// 1 % of the hot keys' failures after their first.
const MOST_RESETS: usize = (HOT as usize * (FAILURES as usize - 1)) / 100;

/// Runs the scenario; `reset(round, delay)` says whether the `round`-th failure (from 0) of a
/// hot key was treated as a first failure. Returns the reset failures per hot key.
fn scenario(l: &dyn RateLimiter<u64>, reset: impl Fn(u32, Duration) -> bool) -> Vec<usize> {
    for k in 0..FILL {
        l.when(&k);
    }
    let hot = |h: u64| 1_000_000_000 + h;
    let mut fresh = 2_000_000_000u64;
    let mut resets = vec![0; HOT as usize];
    for round in 0..FAILURES {
        for h in 0..HOT {
            if reset(round, l.when(&hot(h))) {
                resets[h as usize] += 1;
            }
            for _ in 0..NEW_BETWEEN {
                l.when(&fresh);
                fresh += 1;
            }
        }
    }
    resets
}

fn assert_few(resets: &[usize]) {
    let total: usize = resets.iter().sum();
    assert!(
        total <= MOST_RESETS,
        "{total} of {} failures found their key evicted; per key: {resets:?}",
        HOT as usize * (FAILURES as usize - 1)
    );
}

#[test]
fn exponential_keeps_keys_that_keep_failing() {
    let base = Duration::from_millis(1);
    let l = ExponentialRateLimiter::with_max_keys(base, Duration::from_secs(1000), CAPACITY)
        .unwrap()
        .with_hash_seed(SEED);
    // Round 0 waits `base`; any later failure waiting `base` restarted.
    let resets = scenario(&l, |round, d| round > 0 && d == base);
    assert_few(&resets);
    assert!(l.len() <= CAPACITY);
}

#[test]
fn fast_slow_keeps_keys_that_keep_failing() {
    let (fast, slow) = (Duration::from_millis(1), Duration::from_secs(10));
    let l = FastSlowRateLimiter::with_max_keys(fast, slow, 1, CAPACITY)
        .unwrap()
        .with_hash_seed(SEED);
    let resets = scenario(&l, |round, d| round > 0 && d == fast);
    assert_few(&resets);
}

#[tokio::test(start_paused = true)]
async fn item_bucket_keeps_keys_that_keep_failing() {
    // Time stands still: a kept key's k-th failure waits k seconds, a reset one waits 0.
    let l = ItemBucketRateLimiter::with_max_keys(Duration::from_secs(1), 1, CAPACITY)
        .unwrap()
        .with_hash_seed(SEED);
    let resets = scenario(&l, |round, d| round > 0 && d.is_zero());
    assert_few(&resets);
    assert!(l.len() <= CAPACITY);
}

#[test]
fn a_full_map_evicts_keys_seen_once_before_keys_called_again() {
    // 256 keys per stripe; 64 keys called again every 256 new keys survive 20,000 new keys.
    let l = ExponentialRateLimiter::with_max_keys(
        Duration::from_millis(1),
        Duration::from_secs(1),
        4096,
    )
    .unwrap()
    .with_hash_seed(SEED);
    for k in 0..10_000u64 {
        l.when(&k);
    }
    let hot = |h: u64| 1_000_000 + h;
    let mut calls = 0;
    for k in 100_000..120_000u64 {
        if k % 256 == 0 {
            for h in 0..64 {
                l.when(&hot(h));
            }
            calls += 1;
        }
        l.when(&k);
    }
    let kept = (0..64)
        .filter(|&h| l.num_requeues(&hot(h)) == calls)
        .count();
    assert_eq!(kept, 64);
    assert!(l.len() <= 4096);
}

#[test]
fn a_stream_of_new_keys_replaces_the_oldest() {
    // Least recently called first, approximately: after 40,000 keys seen once through a map of
    // 4,096, the survivors are recent ones; none of the first 20,000 is left.
    let l = ExponentialRateLimiter::with_max_keys(
        Duration::from_millis(1),
        Duration::from_secs(1),
        4096,
    )
    .unwrap()
    .with_hash_seed(SEED);
    for k in 0..40_000u64 {
        l.when(&k);
    }
    let old = (0..20_000u64).filter(|k| l.num_requeues(k) > 0).count();
    assert_eq!(old, 0);
    let recent = (36_000..40_000u64)
        .filter(|k| l.num_requeues(k) > 0)
        .count();
    assert!(recent > 3000, "recent {recent}");
}

#[test]
fn with_a_hash_seed_eviction_is_reproducible() {
    // The same calls on two limiters with one seed evict the same keys.
    let survivors = || {
        let l = ExponentialRateLimiter::with_max_keys(
            Duration::from_millis(1),
            Duration::from_secs(1),
            64,
        )
        .unwrap()
        .with_hash_seed(SEED);
        for k in 0..1000u64 {
            l.when(&k);
        }
        (0..1000u64)
            .filter(|k| l.num_requeues(k) > 0)
            .collect::<Vec<_>>()
    };
    let first = survivors();
    assert_eq!(first.len(), 64);
    assert_eq!(first, survivors());
}

#[test]
fn the_bound_holds_at_every_call_while_the_hand_wraps() {
    // One key per stripe: an eviction's scan that starts near the end of a tiny table must wrap
    // to its start to find the one entry, on every sweep.
    let ms = Duration::from_millis;
    let exp = ExponentialRateLimiter::with_max_keys(ms(1), Duration::from_secs(1), 16).unwrap();
    let bucket = ItemBucketRateLimiter::with_max_keys(ms(100), 1, 16).unwrap();
    for k in 0..2_000u64 {
        exp.when(&k);
        bucket.when(&k);
        assert!(exp.len() <= 16, "{} keys after key {k}", exp.len());
        assert!(bucket.len() <= 16, "{} keys after key {k}", bucket.len());
    }
}
