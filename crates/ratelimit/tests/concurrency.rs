//! Concurrent use from many tasks and threads, and the auto traits of the public types.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_ratelimit::{
    BucketRateLimiter, ConfigError, ExponentialRateLimiter, FastSlowRateLimiter,
    ItemBucketRateLimiter, MaxOfRateLimiter, RateLimiter, WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
};

fn assert_send_sync_unpin<T: Send + Sync + Unpin>() {}

#[test]
fn public_types_are_send_sync_unpin() {
    assert_send_sync_unpin::<BucketRateLimiter>();
    assert_send_sync_unpin::<ItemBucketRateLimiter<String>>();
    assert_send_sync_unpin::<ExponentialRateLimiter<String>>();
    assert_send_sync_unpin::<FastSlowRateLimiter<String>>();
    assert_send_sync_unpin::<MaxOfRateLimiter<String>>();
    assert_send_sync_unpin::<WithMaxWaitRateLimiter<BucketRateLimiter>>();
    assert_send_sync_unpin::<Arc<dyn RateLimiter<str>>>();
    assert_send_sync_unpin::<ConfigError>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_count_every_failure() {
    let l = Arc::new(
        ExponentialRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap(),
    );
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let l = l.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..500u64 {
                // Every task hits the shared key and one key of its own.
                l.when(&0);
                l.when(&(1 + t));
                if i % 100 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(l.num_requeues(&0), 16 * 500);
    for t in 0..16u64 {
        assert_eq!(l.num_requeues(&(1 + t)), 500);
    }
    assert_eq!(l.when(&0), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn default_limiter_from_threads_counts_and_forgets() {
    let l: Arc<dyn RateLimiter<u64>> = Arc::new(default_controller_rate_limiter());
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let l = l.clone();
        handles.push(tokio::task::spawn_blocking(move || {
            let mut delays = Vec::new();
            for i in 0..100u64 {
                delays.push(l.when(&(t * 1000 + i % 10)));
            }
            for i in 0..10u64 {
                l.forget(&(t * 1000 + i));
            }
            delays
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    // 400 bucket reservations at one paused instant: 100 free, then 100 ms apart up to 30 s.
    // The exponential part is at most 5 ms * 2^9 = 2.56 s, so every longer delay is the
    // bucket's, each handed out exactly once.
    all.sort();
    assert_eq!(all.len(), 400);
    let long: Vec<_> = all
        .into_iter()
        .filter(|d| *d > Duration::from_millis(2560))
        .collect();
    let want: Vec<_> = (26..=300u64)
        .map(|k| Duration::from_millis(100 * k))
        .collect();
    assert_eq!(long, want);
    for t in 0..4u64 {
        for i in 0..10u64 {
            assert_eq!(l.num_requeues(&(t * 1000 + i)), 0);
        }
    }
}
