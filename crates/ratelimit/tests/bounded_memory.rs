//! Per-item maps stay bounded when `forget` is never called (kubernetes/kubernetes#138743).

use std::time::Duration;

use ctrlq_ratelimit::{
    ExponentialRateLimiter, FastSlowRateLimiter, ItemBucketRateLimiter, RateLimiter,
};

#[test]
fn exponential_map_is_capped_at_max_keys() {
    let l =
        ExponentialRateLimiter::with_max_keys(Duration::from_millis(1), Duration::from_secs(1), 64)
            .unwrap();
    for i in 0..100_000u32 {
        l.when(&i);
    }
    assert!(l.len() <= 64, "len {}", l.len());
    assert!(!l.is_empty());
}

#[test]
fn an_evicted_key_restarts_at_base() {
    let l =
        ExponentialRateLimiter::with_max_keys(Duration::from_millis(1), Duration::from_secs(1), 16)
            .unwrap();
    for i in 0..10_000u32 {
        l.when(&i);
        l.when(&i);
    }
    let evicted = (0..10_000u32).find(|i| l.num_requeues(i) == 0).unwrap();
    assert_eq!(l.when(&evicted), Duration::from_millis(1));
}

#[test]
fn fast_slow_map_is_capped_at_max_keys() {
    let ms = Duration::from_millis;
    let l = FastSlowRateLimiter::with_max_keys(ms(1), ms(2), 3, 32).unwrap();
    for i in 0..50_000u64 {
        l.when(&i);
    }
    let tracked = (0..50_000u64).filter(|i| l.num_requeues(i) > 0).count();
    assert!(tracked <= 32, "tracked {tracked}");
}

#[tokio::test(start_paused = true)]
async fn item_bucket_map_is_capped_at_max_keys() {
    let l = ItemBucketRateLimiter::with_max_keys(Duration::from_secs(1), 1, 128).unwrap();
    for i in 0..10_000u32 {
        l.when(&i);
    }
    assert!(l.len() <= 128, "len {}", l.len());
}
