//! The `governor` feature: a governor limiter on tokio's clock, and governor limiters as retry
//! limiters.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_ratelimit::governor::{GovernorKeyedRateLimiter, GovernorRateLimiter, TokioClock};
use ctrlq_ratelimit::{ExponentialRateLimiter, MaxOfRateLimiter, RateLimiter};
use governor::clock::Clock;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter as Governor};
use tokio::time::Instant;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_governor_limiter_on_the_tokio_clock_follows_paused_time() {
    let limiter = Governor::direct_with_clock(Quota::per_second(nz(4)), TokioClock);
    let start = Instant::now();
    for _ in 0..4 {
        assert!(limiter.check().is_ok());
    }
    let refused = limiter.check().unwrap_err();
    assert_eq!(
        refused.earliest_possible().into_inner(),
        start + Duration::from_millis(250)
    );
    tokio::time::sleep(refused.wait_time_from(TokioClock.now())).await;
    assert!(limiter.check().is_ok());
    assert!(limiter.check().is_err());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(limiter.check().is_ok(), "a second later the burst is back");
}

#[tokio::test(start_paused = true)]
async fn a_governor_rate_limiter_shares_the_quota_and_does_not_reserve() {
    let quota = Quota::per_second(nz(10)).allow_burst(nz(3));
    let shared = Arc::new(Governor::direct_with_clock(quota, TokioClock));
    let retries = GovernorRateLimiter::new(shared.clone());
    assert!(shared.check().is_ok());
    assert!(shared.check().is_ok());
    assert_eq!(retries.when(&"a"), Duration::ZERO);
    // Refused calls claim nothing: each is told the same wait, and the application too.
    let ms = Duration::from_millis;
    assert_eq!(retries.when(&"b"), ms(100));
    assert_eq!(retries.when(&"c"), ms(100));
    assert!(shared.check().is_err());
    assert_eq!(retries.num_requeues(&"b"), 0);
    tokio::time::sleep(ms(40)).await;
    assert_eq!(retries.when(&"b"), ms(60));
    tokio::time::sleep(ms(60)).await;
    assert_eq!(retries.when(&"b"), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_governor_rate_limiter_gives_each_key_its_own_cells() {
    let store = DefaultKeyedStateStore::<String>::default();
    let shared = Arc::new(Governor::new(Quota::per_second(nz(1)), store, TokioClock));
    let retries = GovernorKeyedRateLimiter::new(shared.clone());
    let (a, b) = ("ns/a".to_string(), "ns/b".to_string());
    assert_eq!(retries.when(&a), Duration::ZERO);
    assert_eq!(retries.when(&a), Duration::from_secs(1));
    assert_eq!(retries.when(&b), Duration::ZERO);
    assert!(
        shared.check_key(&b).is_err(),
        "the application shares b's cells"
    );
    retries.forget(&a);
    assert_eq!(
        retries.when(&a),
        Duration::from_secs(1),
        "forget keeps governor's state"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(retries.when(&a), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_governor_rate_limiter_composes_with_the_crates_limiters() {
    // The queue's usual exponential backoff, within the application's quota.
    let quota = Quota::per_second(nz(2)).allow_burst(nz(1));
    let governor =
        GovernorRateLimiter::new(Arc::new(Governor::direct_with_clock(quota, TokioClock)));
    let exponential =
        ExponentialRateLimiter::new(Duration::from_millis(5), Duration::from_secs(10));
    let limiter: MaxOfRateLimiter<&str> =
        MaxOfRateLimiter::new(vec![Box::new(governor), Box::new(exponential.unwrap())]).unwrap();
    assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
    assert_eq!(limiter.when(&"a"), Duration::from_millis(500));
    assert_eq!(limiter.num_requeues(&"a"), 2);
}

#[test]
fn the_adapters_are_send_sync_and_unpin() {
    fn assert_auto<T: Send + Sync + Unpin>() {}
    assert_auto::<TokioClock>();
    assert_auto::<GovernorRateLimiter>();
    assert_auto::<GovernorKeyedRateLimiter<String>>();
}
