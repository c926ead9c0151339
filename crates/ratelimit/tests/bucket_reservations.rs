//! The token bucket under paused time: Go's `Reserve().Delay()` sequence, refill, contention.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ItemBucketRateLimiter, RateLimiter, default_controller_rate_limiter,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn burst_is_free_then_delays_grow_by_one_period() {
    let b = BucketRateLimiter::per_second(10, 100).unwrap();
    for _ in 0..100 {
        assert_eq!(b.when("k"), Duration::ZERO);
    }
    for k in 1..=50u64 {
        assert_eq!(b.when("k"), ms(100 * k));
    }
    assert_eq!(RateLimiter::<str>::num_requeues(&b, "k"), 0);
}

#[tokio::test(start_paused = true)]
async fn bucket_refills_while_waiting() {
    let b = BucketRateLimiter::per_second(10, 100).unwrap();
    for _ in 0..100 {
        b.when("k");
    }
    for k in 1..=5u64 {
        assert_eq!(b.when("k"), ms(100 * k));
    }
    // One second later 10 tokens came back, 5 of which were already reserved.
    tokio::time::advance(Duration::from_secs(1)).await;
    for _ in 0..5 {
        assert_eq!(b.when("k"), Duration::ZERO);
    }
    assert_eq!(b.when("k"), ms(100));
    // After a long wait the bucket is full again, and no fuller than its burst.
    tokio::time::advance(Duration::from_secs(60)).await;
    for _ in 0..100 {
        assert_eq!(b.when("k"), Duration::ZERO);
    }
    assert_eq!(b.when("k"), ms(100));
}

#[tokio::test(start_paused = true)]
async fn partial_wait_shortens_the_delay() {
    let b = BucketRateLimiter::per_second(10, 1).unwrap();
    assert_eq!(b.reserve(), Duration::ZERO);
    assert_eq!(b.reserve(), ms(100));
    tokio::time::advance(ms(30)).await;
    assert_eq!(b.reserve(), ms(170));
}

#[tokio::test(start_paused = true)]
async fn delays_line_up_with_tokio_sleep() {
    let b = BucketRateLimiter::per_second(10, 1).unwrap();
    let start = tokio::time::Instant::now();
    for k in 0..5u64 {
        let d = b.reserve();
        tokio::time::sleep(d).await;
        assert_eq!(tokio::time::Instant::now() - start, ms(100 * k));
    }
}

#[tokio::test(start_paused = true)]
async fn default_controller_limiter_takes_the_bucket_when_it_is_longer() {
    let l = default_controller_rate_limiter::<u32>();
    for i in 0..100 {
        assert_eq!(l.when(&i), ms(5));
    }
    assert_eq!(l.when(&1000), ms(100));
    assert_eq!(l.when(&1001), ms(200));
    assert_eq!(l.num_requeues(&1000), 1);
}

#[tokio::test(start_paused = true)]
async fn item_bucket_keeps_one_bucket_per_key() {
    let l = ItemBucketRateLimiter::per_second(1, 1).unwrap();
    assert_eq!(l.when(&"one"), Duration::ZERO);
    assert_eq!(l.when(&"one"), Duration::from_secs(1));
    assert_eq!(l.when(&"one"), Duration::from_secs(2));
    assert_eq!(l.when(&"two"), Duration::ZERO);
    assert_eq!(l.when(&"two"), Duration::from_secs(1));
    l.forget(&"one");
    assert_eq!(l.when(&"one"), Duration::ZERO);
    assert_eq!(l.num_requeues(&"one"), 0);
}

#[tokio::test(start_paused = true)]
async fn item_bucket_reclaims_idle_keys_without_changing_delays() {
    let l = ItemBucketRateLimiter::with_period(ms(100), 2).unwrap();
    for i in 0..5000u32 {
        l.when(&i);
    }
    assert_eq!(l.len(), 5000);
    // Key 7 owes nothing after 100 ms (one token used of two).
    tokio::time::advance(ms(100)).await;
    l.retain_recent();
    assert!(l.is_empty());
    // A key that still owes tokens is kept, and its delays are unchanged.
    assert_eq!(l.when(&7), Duration::ZERO);
    assert_eq!(l.when(&7), Duration::ZERO);
    assert_eq!(l.when(&7), ms(100));
    l.retain_recent();
    assert_eq!(l.len(), 1);
    assert_eq!(l.when(&7), ms(200));
    // The periodic sweep inside `when` reclaims too, without an explicit call: one new key per
    // millisecond, each idle 100 ms later, so about 100 are live; without sweeps 20,000 would be
    // held. A sweep runs after max(len at the previous sweep, 1024) calls.
    let mut most = 0;
    for i in 10_000..30_000u32 {
        l.when(&i);
        most = most.max(l.len());
        tokio::time::advance(ms(1)).await;
    }
    assert!(most < 6000, "most {most}");
    assert!(l.len() <= 1024 + 100, "len {}", l.len());
}

#[tokio::test(start_paused = true)]
async fn contending_threads_get_every_reservation_exactly_once() {
    let b = Arc::new(BucketRateLimiter::per_second(10, 100).unwrap());
    let mut handles = Vec::new();
    for _ in 0..4 {
        let b = b.clone();
        // Blocking-pool threads run in the runtime context, so they read the paused clock.
        handles.push(tokio::task::spawn_blocking(move || {
            (0..250).map(|_| b.reserve()).collect::<Vec<_>>()
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all.sort();
    let mut want = vec![Duration::ZERO; 100];
    want.extend((1..=900u64).map(|k| ms(100 * k)));
    assert_eq!(all, want);
}

#[tokio::test(start_paused = true)]
async fn item_bucket_sweeps_once_every_1024_calls_at_least() {
    let l = ItemBucketRateLimiter::with_period(ms(100), 1).unwrap();
    // Calls 1..=1023 sweep nothing, even once every bucket is full again.
    for k in 0..1023u32 {
        l.when(&k);
    }
    tokio::time::advance(ms(100)).await;
    assert_eq!(l.len(), 1023);
    // Call 1024 sweeps the idle buckets before taking its own.
    l.when(&5000);
    assert_eq!(l.len(), 1);
    // The count restarts: 1023 more calls, then the next sweep.
    for k in 10_000..11_023u32 {
        l.when(&k);
    }
    tokio::time::advance(ms(100)).await;
    assert_eq!(l.len(), 1024);
    l.when(&20_000);
    assert_eq!(l.len(), 1);
    // Buckets in debt are kept, and a sweep that keeps n > 1024 buckets waits n calls for the
    // next. Time stands still: sweeps at calls 1024 (keeps 1024) and 2048 (keeps 2048).
    for k in 30_000..32_048u32 {
        l.when(&k);
    }
    assert_eq!(l.len(), 2049);
    tokio::time::advance(ms(100)).await;
    // 2047 calls: no sweep yet, though every older bucket is idle now.
    for k in 40_000..42_047u32 {
        l.when(&k);
    }
    assert_eq!(l.len(), 4096);
    // The 2048th sweeps the 2049 idle ones; the 2047 just taken are in debt.
    l.when(&50_000);
    assert_eq!(l.len(), 2048);
}
