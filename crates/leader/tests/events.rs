//! Leadership events and the stand-until-cancelled loop, on paused time over the in-memory lock.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{
    LeaderElectionConfig, LeaderElector, LeadershipEnd, LeadershipEvent, LeadershipEvents,
    MemoryStore,
};
use tokio::time::{Instant, sleep, timeout};
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

/// Every event waiting, as (started?, fencing token, reason, instant).
fn drain(events: &mut LeadershipEvents) -> Vec<(bool, u64, Option<LeadershipEnd>, Instant)> {
    std::iter::from_fn(|| events.try_recv())
        .map(|e| match e {
            LeadershipEvent::Started { at, fencing_token } => (true, fencing_token, None, at),
            LeadershipEvent::Stopped {
                at,
                fencing_token,
                reason,
            } => (false, fencing_token, Some(reason), at),
            _ => unreachable!("no other events exist"),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn events_should_keep_a_loss_and_a_regain_that_a_watch_collapses() {
    let store = MemoryStore::new();
    let elector = Arc::new(LeaderElector::new(store.lock("a"), config()).unwrap());
    let mut events = elector.subscribe_leadership();
    let mut leading = elector.subscribe_status();
    let stop = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn({
        let (elector, stop) = (elector.clone(), stop.clone());
        async move {
            bounded(
                elector.run_until_cancelled(stop, |l| async move { l.token().cancelled().await }),
            )
            .await
        }
    });
    sleep(Duration::from_secs(1)).await;
    assert!(leading.borrow_and_update().leading);
    // No renew succeeds before the renew deadline (each failing renew is an update and a get:
    // twelve faults cover the five tries), so the lease is given up, then won again.
    store.fail_next("a", 12);
    sleep(Duration::from_secs(40)).await;
    // The watch shows the latest value only: the loss in between is gone.
    assert!(leading.borrow_and_update().leading);
    stop.cancel();
    let terms = timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    let seen = drain(&mut events);
    assert_eq!(terms, 2);
    let kinds: Vec<_> = seen.iter().map(|&(s, t, r, _)| (s, t, r)).collect();
    assert_eq!(
        kinds,
        [
            (true, 0, None),
            (false, 0, Some(LeadershipEnd::RenewDeadlinePassed)),
            (true, 1, None),
            (false, 1, Some(LeadershipEnd::StopRequested)),
        ]
    );
    let at: Vec<_> = seen.iter().map(|e| e.3 - start).collect();
    assert_eq!(at[0], Duration::ZERO);
    // The first renew was sent at 2 s, so the deadline is 2 s + 10 s.
    assert_eq!(at[1], Duration::from_secs(12));
    assert!(at[1] < at[2] && at[2] <= Duration::from_secs(41), "{at:?}");
    assert_eq!(at[3], Duration::from_secs(41));
}

#[tokio::test(start_paused = true)]
async fn every_subscriber_gets_every_event_and_a_dropped_one_is_forgotten() {
    let elector = LeaderElector::new(MemoryStore::new().lock("a"), config()).unwrap();
    let (mut first, second) = (
        elector.subscribe_leadership(),
        elector.subscribe_leadership(),
    );
    drop(second);
    for _ in 0..3 {
        bounded(elector.run(CancellationToken::new(), |_| async {})).await;
    }
    let tokens: Vec<_> = drain(&mut first).iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(
        tokens,
        [
            (true, 0),
            (false, 0),
            (true, 1),
            (false, 1),
            (true, 2),
            (false, 2)
        ]
    );
    drop(elector);
    assert_eq!(first.recv().await, None);
}

#[tokio::test(start_paused = true)]
async fn run_until_cancelled_should_return_no_terms_when_cancelled_before_leading() {
    let store = MemoryStore::new();
    let holder = LeaderElector::new(store.lock("b"), config()).unwrap();
    let hold = CancellationToken::new();
    let holding = holder.run(hold.clone(), |l| async move { l.token().cancelled().await });
    let candidate = LeaderElector::new(store.lock("a"), config()).unwrap();
    let stop = CancellationToken::new();
    let standing = async {
        sleep(Duration::from_secs(5)).await;
        stop.cancel();
        bounded(candidate.run_until_cancelled(stop.clone(), |_| async {})).await
    };
    let out = tokio::select! {
        _ = holding => None,
        terms = standing => Some(terms),
    };
    assert_eq!(out, Some(0));
}

#[tokio::test(start_paused = true)]
async fn run_until_cancelled_should_wait_a_retry_period_after_work_that_returns() {
    let elector = LeaderElector::new(MemoryStore::new().lock("a"), config()).unwrap();
    let stop = CancellationToken::new();
    let start = Instant::now();
    let mut began = Vec::new();
    let terms = bounded(elector.run_until_cancelled(stop.clone(), |_| {
        began.push(start.elapsed());
        if began.len() == 3 {
            stop.cancel();
        }
        async {}
    }))
    .await;
    assert_eq!(terms, 3);
    let s = Duration::from_secs;
    assert_eq!(began, [s(0), s(2), s(4)]);
}

#[test]
fn the_event_types_are_send_sync_and_unpin() {
    fn assert_auto<T: Send + Sync + Unpin>() {}
    assert_auto::<LeadershipEvent>();
    assert_auto::<LeadershipEvents>();
}

/// A run dropped while leading stops leading and says so: the lossless events get its
/// `Stopped`, with the reason `RunDropped`, before the next run's `Started`.
#[tokio::test(start_paused = true)]
async fn a_run_dropped_while_leading_sends_its_stopped_event() {
    let store = MemoryStore::new();
    let elector = LeaderElector::new(store.lock("a"), config()).unwrap();
    let mut events = elector.subscribe_leadership();
    let dropped = tokio::time::timeout(
        Duration::from_secs(5),
        elector.run(CancellationToken::new(), |_| std::future::pending::<()>()),
    )
    .await;
    assert!(dropped.is_err());
    assert!(!elector.is_leader());
    bounded(elector.run(CancellationToken::new(), |_| async {})).await;
    let seen: Vec<_> = drain(&mut events)
        .into_iter()
        .map(|(started, token, reason, _)| (started, token, reason))
        .collect();
    assert_eq!(
        seen,
        [
            (true, 0, None),
            (false, 0, Some(LeadershipEnd::RunDropped)),
            (true, 1, None),
            (false, 1, Some(LeadershipEnd::WorkFinished)),
        ]
    );
}
