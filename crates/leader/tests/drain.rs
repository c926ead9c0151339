//! Leadership through a graceful drain, end reasons and the elector's status, over the in-memory
//! lock on paused time.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_leader::{
    LeaderElectionConfig, LeaderElector, LeadershipEnd, Lock, MemoryLock, MemoryStore,
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

/// Spawns candidate `id` looping on `run`; its work sends the start of each term.
fn spawn_follower(
    store: &MemoryStore,
    id: &str,
) -> (
    Arc<LeaderElector<MemoryLock>>,
    tokio::sync::mpsc::UnboundedReceiver<Instant>,
) {
    let e = Arc::new(LeaderElector::new(store.lock(id), config()).unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let e2 = e.clone();
    tokio::spawn(async move {
        loop {
            let tx = tx.clone();
            bounded(e2.run(CancellationToken::new(), |l| async move {
                let _ = tx.send(Instant::now());
                l.token().cancelled().await;
            }))
            .await;
        }
    });
    (e, rx)
}

/// The graceful shutdown a new user wires: a stop on a leader whose work takes 20 s to drain. The lease must stay
/// with it until the work returns; only then may the other replica lead.
#[tokio::test(start_paused = true)]
async fn stop_should_keep_the_lease_until_the_drain_finishes() {
    let store = MemoryStore::new();
    let a = LeaderElector::new(store.lock("a"), config().release_on_cancel(true)).unwrap();
    let stop = CancellationToken::new();
    let run = a.run(stop.clone(), |l| async move {
        // b starts once a leads, then a is asked to stop 1 s later.
        sleep(Duration::from_secs(1)).await;
        stop.cancel();
        let asked = Instant::now();
        timeout(Duration::from_secs(1), l.token().cancelled())
            .await
            .expect("the token fires on a stop");
        assert_eq!(Instant::now(), asked, "at once");
        assert_eq!(l.end_reason(), Some(LeadershipEnd::StopRequested));
        sleep(Duration::from_secs(20)).await;
        (Instant::now(), l.end_reason())
    });
    let (b, mut b_terms) = spawn_follower(&store, "b");
    let (a_done, reason) = timeout(Duration::from_secs(60), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, Some(LeadershipEnd::StopRequested));
    let b_start = timeout(Duration::from_secs(60), b_terms.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        b_start >= a_done,
        "b led at {b_start:?}, a drained until {a_done:?}"
    );
    assert!(b.is_leader());
    // released on return: b took over within a retry period and its jitter, not a lease.
    assert!(b_start - a_done < Duration::from_millis(4400));
}

/// The drain is bounded by the grace period: then renewing stops and the lease expires.
#[tokio::test(start_paused = true)]
async fn grace_period_should_bound_the_drain() {
    let store = MemoryStore::new();
    let a = LeaderElector::new(
        store.lock("a"),
        config().grace_period(Duration::from_secs(5)),
    )
    .unwrap();
    let stop = CancellationToken::new();
    let mut leading = a.subscribe_status();
    let stop2 = stop.clone();
    let run = a.run(stop, |l| async move {
        stop2.cancel();
        let asked = Instant::now();
        sleep(Duration::from_secs(60)).await;
        (asked, l.end_reason())
    });
    tokio::pin!(run);
    let stopped_at = tokio::select! {
        _ = &mut run => panic!("the work runs 60 s"),
        r = timeout(Duration::from_secs(30), async {
            leading.wait_for(|s| s.leading).await.unwrap();
            leading.wait_for(|s| !s.leading).await.unwrap();
            Instant::now()
        }) => r.unwrap(),
    };
    let (asked, reason) = timeout(Duration::from_secs(120), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stopped_at - asked, Duration::from_secs(5));
    assert_eq!(reason, Some(LeadershipEnd::StopRequested));
}

#[tokio::test(start_paused = true)]
async fn end_reason_should_say_lost_to_other_or_renew_deadline() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let s = store.clone();
    let reason = bounded(e.run(CancellationToken::new(), |l| async move {
        assert_eq!(l.end_reason(), None);
        let other = s.lock("other");
        other.get().await.unwrap();
        other
            .update(ctrlq_leader::LeaderRecord {
                holder_identity: "other".into(),
                lease_duration_seconds: 15,
                ..Default::default()
            })
            .await
            .unwrap();
        timeout(Duration::from_secs(30), l.token().cancelled())
            .await
            .unwrap();
        l.end_reason()
    }))
    .await;
    assert_eq!(reason, Some(Some(LeadershipEnd::LostToOther)));

    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let s = store.clone();
    let reason = bounded(e.run(CancellationToken::new(), |l| async move {
        s.partition("a", true);
        timeout(Duration::from_secs(30), l.token().cancelled())
            .await
            .unwrap();
        l.end_reason()
    }))
    .await;
    assert_eq!(reason, Some(Some(LeadershipEnd::RenewDeadlinePassed)));
}

/// A loss during a drain fires nothing new (the token already fired) but the reason says so.
#[tokio::test(start_paused = true)]
async fn a_loss_during_the_drain_should_replace_stop_requested() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let stop = CancellationToken::new();
    let (s, stop2) = (store.clone(), stop.clone());
    let reason = bounded(e.run(stop, |l| async move {
        stop2.cancel();
        s.partition("a", true);
        sleep(Duration::from_secs(20)).await;
        l.end_reason()
    }))
    .await;
    assert_eq!(reason, Some(Some(LeadershipEnd::RenewDeadlinePassed)));
    assert!(!e.is_leader());
}

#[tokio::test(start_paused = true)]
async fn work_returning_should_end_with_work_finished_and_run_again() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let keep = Arc::new(std::sync::Mutex::new(None));
    let k2 = keep.clone();
    bounded(e.run(CancellationToken::new(), |l| async move {
        *k2.lock().unwrap() = Some(l);
    }))
    .await;
    let l = keep.lock().unwrap().take().unwrap();
    assert!(l.token().is_cancelled());
    assert_eq!(l.end_reason(), Some(LeadershipEnd::WorkFinished));
    let again = bounded(e.run(
        CancellationToken::new(),
        |l| async move { l.fencing_token() },
    ))
    .await;
    assert!(again > Some(l.fencing_token()));
}

/// A candidate whose store fails is visible: the status counts failures in a row and keeps
/// the last error; an answer resets the count.
#[tokio::test(start_paused = true)]
async fn status_should_show_persistent_lock_failures() {
    let store = MemoryStore::new();
    store.partition("a", true);
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let mut status = e.subscribe_status();
    let cancel = CancellationToken::new();
    let run = e.run(cancel.clone(), |l| async move { l.fencing_token() });
    tokio::pin!(run);
    tokio::select! {
        _ = &mut run => panic!("cannot lead while partitioned"),
        r = timeout(Duration::from_secs(60), status.wait_for(|s| s.consecutive_failures >= 3)) => {
            r.unwrap().unwrap();
        }
    }
    {
        let s = status.borrow();
        assert!(!s.leading);
        let err = s.last_error.as_ref().expect("the last error is kept");
        assert!(matches!(**err, ctrlq_leader::LockError::Backend(_)));
        let source = std::error::Error::source(&**err).unwrap().to_string();
        assert!(source.contains("partitioned"), "{source}");
    }
    assert!(e.subscribe_status().borrow().lock_errors >= 3);
    store.partition("a", false);
    let out = timeout(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(out, Some(0));
    assert_eq!(status.borrow().consecutive_failures, 0);
    assert!(status.borrow().last_error.is_some());
}

/// The status follows leadership: leading with the grant's fencing token, then not.
#[tokio::test(start_paused = true)]
async fn status_should_follow_leadership() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let status = e.subscribe_status();
    let st = status.clone();
    assert_eq!(e.identity(), "a");
    let e2 = &e;
    bounded(e.run(CancellationToken::new(), |l| async move {
        assert!(e2.is_leader());
        let s = st.borrow().clone();
        assert!(s.leading);
        assert_eq!(s.leader, "a");
        assert_eq!(s.fencing_token, Some(l.fencing_token()));
    }))
    .await;
    assert!(!status.borrow().leading);
    assert_eq!(status.borrow().fencing_token, None);
    assert!(!e.is_leader());
}

#[test]
fn only_losses_should_count_as_losses() {
    assert!(LeadershipEnd::LostToOther.is_loss());
    assert!(LeadershipEnd::RenewDeadlinePassed.is_loss());
    assert!(!LeadershipEnd::StopRequested.is_loss());
    assert!(!LeadershipEnd::WorkFinished.is_loss());
}

/// The lease is released only when a stop was requested and `release_on_cancel` is set.
#[tokio::test(start_paused = true)]
async fn release_should_need_both_a_stop_and_release_on_cancel() {
    // release_on_cancel set, but the work returns on its own: kept, to expire.
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config().release_on_cancel(true)).unwrap();
    bounded(e.run(CancellationToken::new(), |_| async {})).await;
    assert_eq!(store.record().unwrap().holder_identity, "a");
    // a stop, but release_on_cancel unset: kept.
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let stop = CancellationToken::new();
    let s2 = stop.clone();
    bounded(e.run(stop, |_| async move { s2.cancel() })).await;
    assert_eq!(store.record().unwrap().holder_identity, "a");
    // both: released.
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config().release_on_cancel(true)).unwrap();
    let stop = CancellationToken::new();
    let s2 = stop.clone();
    bounded(e.run(stop, |_| async move { s2.cancel() })).await;
    assert!(store.record().unwrap().is_free());
}

/// Watchers of the status wake on changes only, not on every renew of a healthy leader.
#[tokio::test(start_paused = true)]
async fn status_should_not_wake_watchers_on_every_renew() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let mut status = e.subscribe_status();
    let woke = bounded(e.run(CancellationToken::new(), |_| async move {
        status.borrow_and_update();
        sleep(Duration::from_secs(20)).await;
        status.has_changed().unwrap()
    }))
    .await;
    assert_eq!(woke, Some(false));
    assert!(store.operations().len() > 10, "renewed meanwhile");
}
