//! Fencing tokens on every grant, and renew scheduling under store latency, over the in-memory
//! lock on paused time.

use std::time::Duration;

use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

#[path = "support/bounded.rs"]
mod bounded;
use bounded::bounded;

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(2))
        .jitter_seed(7)
}

/// One candidate, partitioned for retry period + renew deadline + 0.5 s and then healed, leads
/// twice: the second grant's token must be greater, though the record still names it.
#[tokio::test(start_paused = true)]
async fn fencing_token_should_increase_when_the_same_holder_acquires_again() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let s = store.clone();
        let run = e.run(CancellationToken::new(), |l| async move {
            let t = l.fencing_token();
            s.partition("a", true);
            let partitioned = Instant::now();
            l.token().cancelled().await;
            let s2 = s.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(partitioned + Duration::from_millis(12_500)).await;
                s2.partition("a", false);
            });
            t
        });
        tokens.push(
            timeout(Duration::from_secs(120), run)
                .await
                .expect("leads within the bound")
                .unwrap(),
        );
    }
    assert!(tokens[1] > tokens[0], "tokens {tokens:?}");
    assert_eq!(store.record().unwrap().holder_identity, "a");
}

/// A grant after a voluntary release by the same holder also gets a greater token.
#[tokio::test(start_paused = true)]
async fn fencing_token_should_increase_after_a_release_and_reacquire() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config().release_on_cancel(true)).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        let run = e.run(cancel, |l| async move {
            c2.cancel();
            l.fencing_token()
        });
        tokens.push(
            timeout(Duration::from_secs(60), run)
                .await
                .unwrap()
                .unwrap(),
        );
        assert!(store.record().unwrap().is_free(), "released");
    }
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "strictly increasing: {tokens:?}"
    );
}

/// Every renew answers 5.5 s after it is sent: below (retry period + renew deadline) / 2 = 6 s,
/// so the leader keeps leading (renews are scheduled from the previous send, not its answer).
#[tokio::test(start_paused = true)]
async fn leader_should_keep_leading_under_latency_below_half_of_retry_plus_deadline() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let s = store.clone();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        s.delay_next("a", 1000, Duration::from_millis(5500));
        let lasted = timeout(Duration::from_secs(120), l.token().cancelled()).await;
        lasted.is_err()
    }))
    .await;
    assert_eq!(out, Some(true), "leadership lasted 120 s of slow renews");
}

/// Above that bound a safe leader cannot keep up: it steps down, before the lease could expire.
#[tokio::test(start_paused = true)]
async fn leader_should_step_down_under_latency_above_half_of_retry_plus_deadline() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let s = store.clone();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        s.delay_next("a", 1000, Duration::from_millis(6500));
        timeout(Duration::from_secs(120), l.token().cancelled())
            .await
            .is_ok()
    }))
    .await;
    assert_eq!(out, Some(true));
}

/// Acquire retries wait a jittered `[1, 2.2)` × retry period after each try, as client-go's
/// `JitterUntil` with factor 1.2: with a fixed seed, 60 waits cover that whole range.
#[tokio::test(start_paused = true)]
async fn acquire_retries_should_wait_one_to_two_point_two_retry_periods() {
    let store = MemoryStore::new();
    store.partition("b", true);
    let e = LeaderElector::new(store.lock("b"), config()).unwrap();
    let mut status = e.subscribe_status();
    let cancel = CancellationToken::new();
    let run = e.run(cancel.clone(), |_| async {});
    tokio::pin!(run);
    let mut tries = Vec::new();
    while tries.len() < 61 {
        tokio::select! {
            _ = &mut run => panic!("cannot lead while partitioned"),
            r = timeout(Duration::from_secs(10), status.changed()) => {
                r.unwrap().unwrap();
                tries.push(Instant::now());
            }
        }
    }
    let waits: Vec<f64> = tries
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(waits.iter().all(|w| (2.0..4.4).contains(w)), "{waits:?}");
    let max = waits.iter().copied().fold(0.0, f64::max);
    let min = waits.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(max > 4.0 && min < 2.4, "{min} .. {max}");
}
