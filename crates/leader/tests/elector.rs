//! Paused-time scenarios of the elector over the in-memory lock.

use std::time::Duration;

use ctrlq_leader::{ConfigError, LeaderElectionConfig, LeaderElector, Lock, MemoryStore};
use tokio::time::Instant;
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

fn ops(store: &MemoryStore) -> Vec<&'static str> {
    store.operations().into_iter().map(|(_, op)| op).collect()
}

#[test]
fn config_should_reject_each_broken_rule() {
    let s = |x| Duration::from_secs(x);
    let c = LeaderElectionConfig::default();
    assert!(matches!(
        c.clone().lease_duration(s(10)).validate(),
        Err(ConfigError::LeaseNotAboveRenewDeadline { .. })
    ));
    assert!(matches!(
        c.clone().retry_period(s(9)).validate(),
        Err(ConfigError::RenewDeadlineNotAboveJitteredRetry { .. })
    ));
    assert!(matches!(
        c.clone().retry_period(Duration::ZERO).validate(),
        Err(ConfigError::Zero("retry period"))
    ));
    assert!(matches!(
        c.clone().lease_duration(s(12)).validate(),
        Err(ConfigError::NoSafetyMargin { .. })
    ));
    assert!(matches!(
        c.clone()
            .lease_duration(Duration::from_millis(15_500))
            .validate(),
        Err(ConfigError::LeaseNotWholeSeconds(_))
    ));
    assert!(c.validate().is_ok());
    let err = LeaderElector::new(MemoryStore::new().lock(""), LeaderElectionConfig::default())
        .unwrap_err();
    assert_eq!(err, ConfigError::EmptyIdentity);
}

#[tokio::test(start_paused = true)]
async fn run_should_acquire_when_absent_then_renew_on_the_fast_path() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        l.fencing_token()
    }))
    .await;
    assert_eq!(out, Some(0));
    // acquire by create, then two fast-path renews at 2 s and 4 s.
    assert_eq!(ops(&store), ["get", "create", "update", "update"]);
    assert_eq!(e.subscribe_status().borrow().slow_path_renews, 0);
}

#[tokio::test(start_paused = true)]
async fn renew_should_fall_back_to_get_after_a_lost_race() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    store.lose_next_update("baz", 1);
    bounded(e.run(CancellationToken::new(), |_| {
        tokio::time::sleep(Duration::from_secs(5))
    }))
    .await;
    assert_eq!(
        ops(&store),
        ["get", "create", "update", "get", "update", "update"]
    );
    assert_eq!(e.subscribe_status().borrow().slow_path_renews, 1);
}

#[tokio::test(start_paused = true)]
async fn acquire_should_wait_for_a_fresh_foreign_lease_to_expire_on_its_own_clock() {
    let store = MemoryStore::new();
    let bing = store.lock("bing");
    let mut rec = ctrlq_leader::LeaderRecord {
        holder_identity: "bing".into(),
        lease_duration_seconds: 3,
        ..Default::default()
    };
    bing.create(rec.clone()).await.unwrap();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let start = Instant::now();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        (Instant::now(), l.fencing_token())
    }))
    .await;
    let (at, fence) = out.unwrap();
    assert!(at - start >= Duration::from_secs(3), "{:?}", at - start);
    assert!(
        at - start < Duration::from_secs(3) + Duration::from_millis(4400),
        "{:?}",
        at - start
    );
    assert_eq!(fence, 1, "taking over increments transitions");
    rec.leader_transitions = 1;
    assert_eq!(store.record().unwrap().holder_identity, "baz");
}

#[tokio::test(start_paused = true)]
async fn acquire_should_take_an_empty_holder_at_once() {
    let store = MemoryStore::new();
    store
        .lock("x")
        .create(ctrlq_leader::LeaderRecord {
            lease_duration_seconds: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let start = Instant::now();
    let at = bounded(e.run(CancellationToken::new(), |_| async { Instant::now() }))
        .await
        .unwrap();
    assert_eq!(at, start);
    assert_eq!(store.record().unwrap().leader_transitions, 1);
}

#[tokio::test(start_paused = true)]
async fn leadership_should_end_within_the_renew_deadline_when_partitioned() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let s2 = store.clone();
    let (start, end) = bounded(e.run(CancellationToken::new(), |l| async move {
        let start = Instant::now();
        s2.partition("baz", true);
        l.token().cancelled().await;
        (start, Instant::now())
    }))
    .await
    .unwrap();
    // last renew sent at acquire (t=0): step down at retry period + renew deadline = 12 s < 15 s.
    assert_eq!(end - start, Duration::from_secs(12));
    assert!(!e.is_leader());
}

#[tokio::test(start_paused = true)]
async fn leadership_should_end_at_once_when_a_renew_sees_another_holder() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let s2 = store.clone();
    let took = bounded(e.run(CancellationToken::new(), |l| async move {
        let start = Instant::now();
        // another writer forces the record over (ignoring the protocol).
        let bing = s2.lock("bing");
        bing.get().await.unwrap();
        bing.update(ctrlq_leader::LeaderRecord {
            holder_identity: "bing".into(),
            lease_duration_seconds: 15,
            ..Default::default()
        })
        .await
        .unwrap();
        l.token().cancelled().await;
        Instant::now() - start
    }))
    .await
    .unwrap();
    assert_eq!(
        took,
        Duration::from_secs(2),
        "the next renew sees bing and stops"
    );
    assert_eq!(e.subscribe_status().borrow().leader, "bing");
}

#[tokio::test(start_paused = true)]
async fn release_on_cancel_should_free_the_lease_after_the_work_finished() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config().release_on_cancel(true)).unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let s2 = store.clone();
    bounded(e.run(cancel, |l| async move {
        c2.cancel();
        l.token().cancelled().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        // still held while the work runs.
        assert_eq!(s2.record().unwrap().holder_identity, "baz");
    }))
    .await;
    let rec = store.record().unwrap();
    assert!(rec.is_free());
    assert_eq!(rec.lease_duration_seconds, 1);
    assert_eq!(ops(&store), ["get", "create", "get", "update"]);
}

#[tokio::test(start_paused = true)]
async fn release_should_not_blank_another_holder() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config().release_on_cancel(true)).unwrap();
    let cancel = CancellationToken::new();
    let (c2, s2) = (cancel.clone(), store.clone());
    bounded(e.run(cancel, |_| async move {
        let bing = s2.lock("bing");
        bing.get().await.unwrap();
        bing.update(ctrlq_leader::LeaderRecord {
            holder_identity: "bing".into(),
            lease_duration_seconds: 15,
            ..Default::default()
        })
        .await
        .unwrap();
        c2.cancel();
    }))
    .await;
    assert_eq!(store.record().unwrap().holder_identity, "bing");
}

#[tokio::test(start_paused = true)]
async fn check_should_fail_only_when_leading_without_renewing() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    bounded(e.run(CancellationToken::new(), |_| async {})).await;
    assert!(e.check(Duration::from_secs(20)).is_ok());
    tokio::time::sleep(Duration::from_secs(36)).await;
    let err = e.check(Duration::from_secs(20)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed election to renew leadership on lease leader"
    );
}

#[tokio::test(start_paused = true)]
async fn run_should_return_none_when_cancelled_before_acquiring() {
    let store = MemoryStore::new();
    store.partition("baz", true);
    let e = LeaderElector::new(store.lock("baz"), config()).unwrap();
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        c2.cancel();
    });
    assert_eq!(bounded(e.run(cancel, |_| async {})).await, None);
}

#[test]
fn handles_should_be_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LeaderElector<ctrlq_leader::MemoryLock>>();
    assert_send_sync::<ctrlq_leader::Leadership>();
    assert_send_sync::<MemoryStore>();
}

#[tokio::test(start_paused = true)]
async fn dropping_run_should_leave_the_lease_to_expire_for_the_next_candidate() {
    let store = MemoryStore::new();
    let a = LeaderElector::new(store.lock("a"), config().release_on_cancel(true)).unwrap();
    let run = a.run(CancellationToken::new(), |l| async move {
        l.token().cancelled().await
    });
    // lead for 5 s, then drop the future (the task is gone, as in a crash).
    assert!(
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .is_err()
    );
    assert_eq!(store.record().unwrap().holder_identity, "a", "not released");
    let b = LeaderElector::new(store.lock("b"), config()).unwrap();
    let start = Instant::now();
    let at = bounded(b.run(CancellationToken::new(), |_| async { Instant::now() }))
        .await
        .unwrap();
    // a's last renew was at 4 s (1 s before b started): b waits out the 15 s lease on its clock.
    assert!(at - start >= Duration::from_secs(15), "{:?}", at - start);
    assert_eq!(store.record().unwrap().leader_transitions, 1);
}

/// Three candidates on one lock; the leader's store becomes slow (6.3 s a request, lease 15 s /
/// renew 10 s / retry 2 s). It steps down, and each acquire it sends then lands after its own
/// renew deadline: granted and dead at once, yet its write names it with a fresh version. It
/// must not keep the two healthy candidates from taking over (DESIGN.md, invariant 5).
#[tokio::test(start_paused = true)]
async fn a_candidate_granted_after_its_deadline_should_not_block_the_others() {
    use std::sync::Arc;
    let store = MemoryStore::new();
    let stop = CancellationToken::new();
    let electors: Vec<_> = ["c", "a", "b"]
        .into_iter()
        .map(|id| Arc::new(LeaderElector::new(store.lock(id), config()).unwrap()))
        .collect();
    // Who leads when, from the status watches.
    let mut watches: Vec<_> = electors
        .iter()
        .map(|e| (e.identity().to_owned(), e.subscribe_status(), false))
        .collect();
    for e in &electors {
        let (e, stop) = (e.clone(), stop.clone());
        // Stand again after every loss, until the test stops.
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                bounded(e.run(stop.clone(), |l| async move { l.token().cancelled().await })).await;
            }
        });
        // `c` acquires first; the others follow as candidates.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let t0 = Instant::now();
    let slow_from = t0 + Duration::from_secs(20);
    let end = t0 + Duration::from_secs(150);
    let mut slowed = false;
    let mut leading: Vec<(String, Instant, Option<Instant>)> = Vec::new();
    while Instant::now() < end {
        if !slowed && Instant::now() >= slow_from {
            store.delay_next("c", u32::MAX, Duration::from_millis(6300));
            slowed = true;
        }
        for (id, w, was_leading) in &mut watches {
            let is_leading = w.borrow_and_update().leading;
            if is_leading != *was_leading {
                *was_leading = is_leading;
                let now = Instant::now();
                if is_leading {
                    leading.push((id.clone(), now, None));
                } else if let Some(t) = leading.iter_mut().rev().find(|t| t.0 == *id) {
                    t.2 = Some(now);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    assert_eq!(
        leading.first().map(|t| t.0.as_str()),
        Some("c"),
        "{leading:?}"
    );
    let c_stopped = leading[0].2.expect("c steps down once its store is slow");
    // A healthy candidate leads within a bound of c's step-down: the record c kept writing
    // expires (one lease duration after the others saw its last write), and they take over.
    let next = leading
        .iter()
        .find(|t| t.0 != "c")
        .unwrap_or_else(|| panic!("no healthy candidate ever led: {leading:?}"));
    let without_leader = next.1 - c_stopped;
    assert!(
        without_leader <= Duration::from_secs(60),
        "no leader for {without_leader:?}: {leading:?}"
    );
    // c never led again, and the healthy leader kept leading to the end.
    assert!(leading[1..].iter().all(|t| t.0 != "c"), "{leading:?}");
    assert_eq!(next.2, None, "{leading:?}");
    assert!(electors[0].subscribe_status().borrow().late_acquires >= 1);
    assert_eq!(
        electors[1].subscribe_status().borrow().late_acquires
            + electors[2].subscribe_status().borrow().late_acquires,
        0
    );
}

/// `is_leader` answers "do I lead now": a partitioned former leader says no once it stepped
/// down, though the last record it saw still names it (`record_names_me`), and also while the
/// work is still running after the loss. A dropped run stops leading too.
#[tokio::test(start_paused = true)]
async fn is_leader_should_mean_leading_now_not_named_by_the_last_record() {
    use std::sync::Arc;
    let store = MemoryStore::new();
    let e = Arc::new(LeaderElector::new(store.lock("a"), config()).unwrap());
    let (e2, s2) = (e.clone(), store.clone());
    let seen = bounded(e.run(CancellationToken::new(), |l| async move {
        let leading = e2.is_leader();
        s2.partition("a", true);
        l.token().cancelled().await;
        // The work still runs; leadership has ended.
        (leading, e2.is_leader(), e2.record_names_me())
    }))
    .await
    .unwrap();
    assert_eq!(seen, (true, false, true));
    assert!(!e.is_leader());
    assert!(e.record_names_me());

    // A run dropped while leading.
    store.partition("a", false);
    let b = LeaderElector::new(store.lock("b"), config()).unwrap();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let run = b.run(CancellationToken::new(), |_| async move {
        started_tx.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    tokio::select! {
        _ = bounded(run) => unreachable!("the work never ends"),
        r = started_rx => r.unwrap(),
    }
    assert!(!b.is_leader(), "the dropped run no longer leads");
    assert!(!b.is_leader());
}

/// The late-acquire rule's edges: an acquire answered within its renew deadline (10 s against
/// retry period + renew deadline = 12 s) leads; one answered after it (12.6 s) does not, and
/// the candidate sends nothing for a lease duration plus twice the longest jittered retry
/// period (23.8 s), plus this try's own jitter (at most 2.4 s).
#[tokio::test(start_paused = true)]
async fn a_late_acquire_backs_off_for_its_bound_and_a_timely_one_leads() {
    // 5 s a request: get + create answer at 10 s, in time.
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    store.delay_next("a", 2, Duration::from_secs(5));
    let start = Instant::now();
    let led_at = bounded(e.run(CancellationToken::new(), |_| async { Instant::now() }))
        .await
        .unwrap();
    assert_eq!(led_at - start, Duration::from_secs(10));
    assert_eq!(e.subscribe_status().borrow().late_acquires, 0);

    // 6.3 s a request: get + create answer at 12.6 s, too late.
    let store = MemoryStore::new();
    let e = std::sync::Arc::new(LeaderElector::new(store.lock("b"), config()).unwrap());
    store.delay_next("b", 2, Duration::from_millis(6300));
    let e2 = e.clone();
    let run = tokio::spawn(async move {
        bounded(e2.run(CancellationToken::new(), |_| async {})).await;
    });
    tokio::time::sleep(Duration::from_millis(12_700)).await;
    assert_eq!(e.subscribe_status().borrow().late_acquires, 1);
    let ops = store.operations().len();
    assert_eq!(ops, 2, "get and create");
    // Silent for the whole back-off.
    tokio::time::sleep(Duration::from_millis(23_700)).await;
    assert_eq!(store.operations().len(), ops, "a try inside the back-off");
    // Then it tries again, within its own jitter.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(store.operations().len() > ops, "no try after the back-off");
    run.abort();
}

/// A second elector with an identity in use (another process started with it) does not lead
/// while the first renews, though the record names its identity; once the first stops renewing
/// (its run dropped, the lease not released), the second takes over after the record has not
/// changed for a lease duration.
#[tokio::test(start_paused = true)]
async fn a_second_process_with_an_identity_in_use_waits_for_the_record_to_expire() {
    let store = MemoryStore::new();
    let first = LeaderElector::new(store.lock("a"), config()).unwrap();
    let second = LeaderElector::new(store.lock("a"), config()).unwrap();
    let first_run = tokio::time::timeout(
        Duration::from_secs(60),
        first.run(CancellationToken::new(), |_| std::future::pending::<()>()),
    );
    let second_led = async {
        // Starts once the first leads.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let start = Instant::now();
        bounded(second.run(CancellationToken::new(), |l| async move {
            (Instant::now() - start, l.fencing_token())
        }))
        .await
    };
    let (first_out, second_out) = tokio::join!(first_run, second_led);
    assert!(
        first_out.is_err(),
        "the first led until its run was dropped"
    );
    let (waited, fencing) = second_out.unwrap();
    // The first renewed every 2 s until its run was dropped at 60 s: its last renew was sent
    // at 58 s or later, so the record expires for the second at 73 s at the earliest (72 s
    // after it started), and it sees the last change and then the expiry at most one jittered
    // retry period (2.4 s) late each: leading by 60 + 15 + 4.8 s.
    assert!(
        waited >= Duration::from_secs(72) && waited <= Duration::from_millis(78_800),
        "the second led after {waited:?}"
    );
    assert_eq!(fencing, 1, "a new term");
    assert!(!first.is_leader());
}

/// A record that names this candidate in its own term at another version (a tool labelled the
/// Lease, or a write whose answer was lost) is still its own: the renew goes on, by the slow
/// path. The same record rewritten by another process (another term) ends the leadership as
/// a loss to another holder at the next renew.
#[tokio::test(start_paused = true)]
async fn a_record_rewritten_by_another_process_with_the_same_identity_is_a_loss() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Another process with identity "a" writes its own term over the record.
        let other = store.lock("a");
        let mut record = other.get().await.unwrap().record;
        record.leader_transitions += 1;
        record.acquire_time = std::time::SystemTime::now() + Duration::from_secs(1);
        other.update(record).await.unwrap();
        l.token().cancelled().await;
        l.end_reason()
    }))
    .await;
    assert_eq!(out, Some(Some(ctrlq_leader::LeadershipEnd::LostToOther)));
}

/// The grant holds until retry period + renew deadline after the acquire or the last successful
/// renew was sent, and each renew moves it on; with the store cut off it ends there.
#[tokio::test(start_paused = true)]
async fn a_grant_is_current_until_its_last_renew_plus_the_renew_deadline() {
    let store = MemoryStore::new();
    let e = LeaderElector::new(store.lock("a"), config()).unwrap();
    let t0 = Instant::now();
    let out = bounded(e.run(CancellationToken::new(), |l| async move {
        assert_eq!(l.valid_until(), t0 + Duration::from_secs(12));
        assert!(l.is_current());
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Renewed at 2 s and 4 s.
        assert_eq!(l.valid_until(), t0 + Duration::from_secs(16));
        store.partition("a", true);
        tokio::time::sleep_until(t0 + Duration::from_secs(16) - Duration::from_millis(1)).await;
        let before = l.is_current();
        tokio::time::sleep(Duration::from_millis(1)).await;
        (before, l.is_current(), l.current().await)
    }))
    .await;
    assert_eq!(out, Some((true, false, false)));
}

/// A grant holds strictly before retry period + renew deadline after its write was sent: an
/// acquire answered exactly then (get and create at 6 s each, 12 s in all) is late.
#[tokio::test(start_paused = true)]
async fn an_acquire_answered_exactly_at_its_deadline_is_late() {
    let store = MemoryStore::new();
    let e = std::sync::Arc::new(LeaderElector::new(store.lock("a"), config()).unwrap());
    store.delay_next("a", 2, Duration::from_secs(6));
    let e2 = e.clone();
    let run = tokio::spawn(async move {
        bounded(e2.run(CancellationToken::new(), |_| async {})).await;
    });
    tokio::time::sleep(Duration::from_millis(12_100)).await;
    assert_eq!(e.subscribe_status().borrow().late_acquires, 1);
    assert!(!e.is_leader());
    run.abort();
}

/// Setters keep what they are given, and the lease duration may be as long as the record's
/// whole seconds can hold, not longer.
#[test]
fn config_should_keep_its_timing_up_to_what_the_record_holds() {
    let timing = LeaderElectionConfig::default()
        .renew_deadline(Duration::from_secs(5))
        .timing();
    assert_eq!(timing.renew_deadline, Duration::from_secs(5));
    let longest = Duration::from_secs(u64::from(u32::MAX));
    let c = LeaderElectionConfig::default();
    assert!(c.clone().lease_duration(longest).validate().is_ok());
    assert_eq!(
        c.lease_duration(longest + Duration::from_secs(1))
            .validate(),
        Err(ConfigError::LeaseNotWholeSeconds(
            longest + Duration::from_secs(1)
        ))
    );
}

/// The edges of every duration rule: zero, the largest `Duration`, and values whose jittered
/// retry period or sums overflow. Each is refused with its typed error, never a panic.
#[test]
fn config_should_refuse_durations_at_the_edges_with_a_typed_error() {
    let s = |x| Duration::from_secs(x);
    let c = LeaderElectionConfig::default();
    let max_rule = |err| {
        matches!(
            err,
            Err(ConfigError::RenewDeadlineNotAboveJitteredRetry { .. })
        )
    };
    assert!(max_rule(c.clone().retry_period(Duration::MAX).validate()));
    // Just above what `mul_f64` can hold after × 1.2, and just below.
    assert!(max_rule(
        c.clone().retry_period(s(u64::MAX / 6 * 5 + 1)).validate()
    ));
    assert!(max_rule(c.clone().retry_period(s(u64::MAX / 2)).validate()));
    assert!(matches!(
        c.clone().renew_deadline(Duration::MAX).validate(),
        Err(ConfigError::LeaseNotAboveRenewDeadline { .. })
    ));
    assert!(matches!(
        c.clone().lease_duration(Duration::MAX).validate(),
        Err(ConfigError::LeaseNotWholeSeconds(Duration::MAX))
    ));
    // A renew deadline and a retry period whose sum overflows.
    let huge = c
        .clone()
        .lease_duration(Duration::MAX)
        .renew_deadline(Duration::MAX - s(1))
        .retry_period(s(u64::MAX / 2));
    assert!(huge.validate().is_err());
    assert!(matches!(
        c.clone().lease_duration(Duration::ZERO).validate(),
        Err(ConfigError::LeaseNotAboveRenewDeadline { .. })
    ));
    assert!(matches!(
        c.clone()
            .lease_duration(Duration::ZERO)
            .renew_deadline(Duration::ZERO)
            .validate(),
        Err(ConfigError::LeaseNotAboveRenewDeadline { .. })
    ));
    // A grace period of any length is valid: it is only ever slept (tokio clamps a sleep).
    assert!(c.clone().grace_period(Duration::MAX).validate().is_ok());
    assert!(c.clone().grace_period(Duration::ZERO).validate().is_ok());
    let err = LeaderElector::new(MemoryStore::new().lock("a"), c.retry_period(Duration::MAX))
        .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::RenewDeadlineNotAboveJitteredRetry { .. }
    ));
}

proptest::proptest! {
    /// Any three durations, the edges drawn often: `validate` answers without panicking, and
    /// what it accepts keeps every rule the elector's arithmetic relies on.
    #[test]
    fn config_validation_never_panics_and_accepts_only_sound_timing(
        ld in duration(), rd in duration(), rp in duration(),
    ) {
        let c = LeaderElectionConfig::default()
            .lease_duration(ld)
            .renew_deadline(rd)
            .retry_period(rp);
        if c.validate().is_ok() {
            proptest::prop_assert!(!rp.is_zero());
            proptest::prop_assert!(rd.as_secs_f64() > rp.as_secs_f64() * 1.2);
            proptest::prop_assert!(ld > rd.checked_add(rp).unwrap());
            proptest::prop_assert!(ld.as_secs() <= u64::from(u32::MAX) && ld.subsec_nanos() == 0);
        }
    }
}

fn duration() -> impl proptest::strategy::Strategy<Value = Duration> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_secs(u64::from(u32::MAX))),
        (0..u64::MAX, 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..100u64).prop_map(Duration::from_secs),
        (0..100_000u64).prop_map(Duration::from_millis),
    ]
}

/// A user's lock with nowhere to create its record: the get finds none, the create answers
/// `NotFound`.
#[derive(Debug)]
struct NowhereToCreate;

#[async_trait::async_trait]
impl Lock for NowhereToCreate {
    async fn get(&self) -> Result<ctrlq_leader::Versioned, ctrlq_leader::LockError> {
        Err(ctrlq_leader::LockError::NotFound)
    }
    async fn create(
        &self,
        _: ctrlq_leader::LeaderRecord,
    ) -> Result<String, ctrlq_leader::LockError> {
        Err(ctrlq_leader::LockError::NotFound)
    }
    async fn update(
        &self,
        _: ctrlq_leader::LeaderRecord,
    ) -> Result<String, ctrlq_leader::LockError> {
        Err(ctrlq_leader::LockError::NotFound)
    }
    fn identity(&self) -> &str {
        "a"
    }
    fn describe(&self) -> String {
        "nowhere".into()
    }
}

/// A create answered `NotFound` fails on every try, so it is a failure the status shows, not a
/// lost race: a candidate that can never lead says why.
#[tokio::test(start_paused = true)]
async fn a_create_answered_not_found_is_a_reported_failure() {
    let e = LeaderElector::new(NowhereToCreate, config()).unwrap();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let status = e.subscribe_status();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(20)).await;
        stop.cancel();
    });
    assert_eq!(bounded(e.run(cancel, |_| async {})).await, None);
    let status = status.borrow().clone();
    assert!(status.lock_errors >= 3, "{status:?}");
    assert!(status.consecutive_failures >= 1, "{status:?}");
    assert!(
        matches!(
            status.last_error.as_deref(),
            Some(ctrlq_leader::LockError::NotFound)
        ),
        "{status:?}"
    );
    assert!(!status.leading);
}
