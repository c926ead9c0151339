//! Replicas on one in-memory lock: leader gating under kills, partitions and stops; standing
//! again after a lost lease; drains on stop.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::testing::{Harness, Record, ScriptedSource};
use ctrlq_controller::{Action, Context, Controller, Drain};
use ctrlq_leader::LeaderElectionConfig;
use support::{Rng, bounded};
use tokio::time::sleep;

const LIMIT: Duration = Duration::from_secs(3600);

type Seen = Arc<Mutex<HashMap<u32, u64>>>;

/// Kubernetes' defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default().release_on_cancel(true)
}

/// The bound on a failover after a crash or partition: the lease, plus the longest jittered
/// retry (2.2 retry periods), plus one retry period of observation slack.
const FAILOVER_BOUND: Duration = Duration::from_millis(15_000 + 4_400 + 2_000);

/// A controller that records the generation each object was last reconciled to; each reconcile
/// takes a seeded 0-300 ms, one in ten up to 20 s (longer than a failover takes).
fn build(api: &ScriptedSource<u32>, seen: &Seen, seed: u64) -> Controller<u32, Infallible> {
    let (a, s) = (api.clone(), seen.clone());
    let rng = Arc::new(Mutex::new(Rng::new(seed)));
    let source = api.clone();
    Controller::new("objects", move |key: u32, ctx: Context| {
        let (api, seen) = (a.clone(), s.clone());
        let took = {
            let mut rng = rng.lock().unwrap();
            let max = if rng.below(10) == 0 { 20_000 } else { 300 };
            rng.millis(max)
        };
        async move {
            assert!(ctx.fencing_token().is_some());
            let generation = api.generation(&key);
            sleep(took).await;
            if let Some(g) = generation {
                seen.lock().unwrap().insert(key, g);
            }
            Ok(Action::Done)
        }
    })
    .source(move || source.subscribe())
    .workers(4)
    .grace_period(Duration::from_secs(2))
}

/// Three replicas; at seeded random moments the leader is killed, partitioned for a while, or
/// stopped gracefully, and replaced; objects change all along. At every reconcile start and end
/// at most one replica is in reconcile and no key is in two; every failover is within the bound;
/// at the end every object was reconciled to its last generation.
#[tokio::test(start_paused = true)]
async fn no_two_replicas_reconcile_at_once_under_kills_partitions_and_stops() {
    for seed in 1..=6 {
        let api = ScriptedSource::new();
        for k in 0..30 {
            api.apply(k);
        }
        let seen: Seen = Arc::default();
        let mut harness = Harness::new(config());
        let mut next_id = 0;
        let mut spawn = |h: &mut Harness<u32>| {
            next_id += 1;
            let id = format!("r{next_id}");
            h.spawn(&id, build(&api, &seen, seed * 100 + next_id));
        };
        for _ in 0..3 {
            spawn(&mut harness);
        }
        let mut rng = Rng::new(seed);
        let mut faults = 0;
        for _ in 0..12 {
            for _ in 0..rng.below(20) {
                sleep(rng.millis(500)).await;
                let k = u32::try_from(rng.below(30)).unwrap();
                api.apply(k);
            }
            sleep(rng.millis(20_000)).await;
            let Some(leader) = harness.leader() else {
                continue;
            };
            faults += 1;
            match rng.below(3) {
                0 => {
                    harness.kill(&leader);
                    spawn(&mut harness);
                }
                1 => {
                    harness.partition(&leader, true);
                    sleep(rng.millis(30_000)).await;
                    harness.partition(&leader, false);
                }
                _ => {
                    let t0 = tokio::time::Instant::now();
                    let summary = bounded(LIMIT, harness.stop(&leader)).await.unwrap();
                    // Drained, or the grace period ran out and the rest was dropped.
                    assert!(
                        summary.drain == Drain::Finished || summary.aborted > 0,
                        "seed {seed}: {summary:?}"
                    );
                    assert!(t0.elapsed() <= Duration::from_secs(2), "seed {seed}");
                    spawn(&mut harness);
                }
            }
        }
        // Let the last failover and its reconciles settle, then stop everyone.
        sleep(Duration::from_secs(60)).await;
        let summaries = bounded(LIMIT, harness.stop_all()).await;
        assert_eq!(summaries.len(), 3);

        let log = harness.observations();
        assert!(faults >= 6, "seed {seed}: {faults} faults");
        assert_eq!(log.overlaps(), 0, "seed {seed}");
        assert_eq!(log.key_overlaps(), 0, "seed {seed}");
        let failovers = log.failovers();
        assert!(failovers.len() >= faults / 2, "seed {seed}: {failovers:?}");
        for (who, took) in &failovers {
            assert!(*took <= FAILOVER_BOUND, "seed {seed}: {who} after {took:?}");
        }
        let seen = seen.lock().unwrap();
        for (k, g) in api.objects() {
            assert_eq!(seen.get(&k), Some(&g), "seed {seed}: key {k}");
        }
        // Every term's fencing token is greater than the one before, the same holder's included.
        let terms: Vec<_> = log
            .records()
            .iter()
            .filter_map(|r| match r {
                Record::Leading {
                    replica,
                    fencing_token,
                    ..
                } => Some((replica.clone(), fencing_token.unwrap())),
                _ => None,
            })
            .collect();
        for w in terms.windows(2) {
            let ok = if w[0].0 == w[1].0 {
                w[0].1 <= w[1].1
            } else {
                w[0].1 < w[1].1
            };
            assert!(ok, "seed {seed}: {terms:?}");
        }
    }
}

/// A lone replica partitioned from the lock loses the lease, drops its in-flight reconciles at
/// once, and once healed stands again: a new term whose fresh queue the warm view fills.
#[tokio::test(start_paused = true)]
async fn after_a_lost_lease_the_replica_stands_again_with_a_fresh_queue() {
    let api = ScriptedSource::new();
    for k in 0..5 {
        api.apply(k);
    }
    let seen: Seen = Arc::default();
    let mut harness = Harness::new(config());
    let slow = {
        let source = api.clone();
        // 5 s each, so that one is in flight when the lease lapses 12 s after the last renew
        // (none starts after that instant).
        Controller::new("objects", |_key: u32, _ctx: Context| async {
            sleep(Duration::from_secs(5)).await;
            Ok::<_, Infallible>(Action::Done)
        })
        .source(move || source.subscribe())
        .workers(1)
    };
    harness.spawn("solo", slow);
    sleep(Duration::from_secs(1)).await;
    harness.partition("solo", true);
    sleep(Duration::from_secs(30)).await;
    harness.partition("solo", false);
    sleep(Duration::from_secs(60)).await;
    let summaries = bounded(LIMIT, harness.stop_all()).await;
    let summary = &summaries[0].1;
    assert_eq!(summary.leases_lost, 1);
    assert!(summary.terms >= 2);
    assert!(
        summary.aborted >= 1,
        "the reconcile in flight at the loss was dropped"
    );

    let log = harness.observations();
    let records = log.records();
    let lost = records
        .iter()
        .position(|r| matches!(r, Record::LeadershipLost { .. }))
        .unwrap();
    let mut after: Vec<u32> = records[lost..]
        .iter()
        .filter_map(|r| match r {
            Record::Started { key, .. } => Some(*key),
            _ => None,
        })
        .collect();
    after.sort_unstable();
    after.dedup();
    assert_eq!(
        after,
        [0, 1, 2, 3, 4],
        "the warm view refilled the new term's queue"
    );
    let _ = seen;
}

/// A controller whose reconciles take `took`, on a lone key source `0..n`.
fn slow(api: &ScriptedSource<u32>, took: Duration) -> Controller<u32, Infallible> {
    let source = api.clone();
    Controller::new("objects", move |_key: u32, _ctx: Context| async move {
        sleep(took).await;
        Ok(Action::Done)
    })
    .source(move || source.subscribe())
    .grace_period(Duration::from_secs(60))
}

fn leading_at(log: &[Record<u32>]) -> Vec<(String, tokio::time::Instant)> {
    log.iter()
        .filter_map(|r| match r {
            Record::Leading { replica, at, .. } => Some((replica.clone(), *at)),
            _ => None,
        })
        .collect()
}

/// A shutdown during a reconcile longer than the lease: the elector keeps renewing while the
/// reconcile finishes, so the other replica cannot lead until the drain is over.
#[tokio::test(start_paused = true)]
async fn the_lease_is_kept_while_the_leader_drains() {
    let api = ScriptedSource::new();
    api.apply(1);
    let mut harness = Harness::new(config());
    harness.spawn("a", slow(&api, Duration::from_secs(25)));
    sleep(Duration::from_secs(1)).await;
    harness.spawn("b", slow(&api, Duration::from_secs(25)));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(harness.leader().as_deref(), Some("a"));
    let summary = bounded(LIMIT, harness.stop("a")).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished, "{summary:?}");
    assert_eq!((summary.reconciles, summary.aborted), (1, 0));
    sleep(Duration::from_secs(30)).await;
    bounded(LIMIT, harness.stop_all()).await;

    let log = harness.observations();
    assert_eq!(log.overlaps(), 0);
    let drained = log
        .records()
        .iter()
        .find_map(|r| match r {
            Record::DrainFinished { replica, at, .. } if replica == "a" => Some(*at),
            _ => None,
        })
        .unwrap();
    let b = leading_at(log.records())
        .into_iter()
        .find(|(r, _)| r == "b")
        .expect("b leads after a released");
    assert!(b.1 >= drained, "b led during a's drain");
}

/// A leader partitioned while it drains loses the lease: its in-flight reconcile is dropped at
/// once, before the other replica can lead.
#[tokio::test(start_paused = true)]
async fn a_lease_lost_during_the_drain_drops_the_reconciles_at_once() {
    let api = ScriptedSource::new();
    api.apply(1);
    let mut harness = Harness::new(config());
    harness.spawn("a", slow(&api, Duration::from_secs(50)));
    sleep(Duration::from_secs(1)).await;
    harness.spawn("b", slow(&api, Duration::from_secs(1)));
    sleep(Duration::from_secs(1)).await;
    harness.request_stop("a");
    sleep(Duration::from_secs(1)).await;
    let partitioned = tokio::time::Instant::now();
    harness.partition("a", true);
    let summary = bounded(LIMIT, harness.stop("a")).await.unwrap();
    assert_eq!(summary.drain, Drain::CutShort);
    assert_eq!(summary.aborted, 1);
    sleep(Duration::from_secs(30)).await;
    bounded(LIMIT, harness.stop_all()).await;

    let log = harness.observations();
    assert_eq!(log.overlaps(), 0);
    let dropped = log
        .records()
        .iter()
        .find_map(|r| match r {
            Record::Finished {
                replica,
                outcome: ctrlq_controller::ReconcileOutcome::Aborted,
                at,
                ..
            } if replica == "a" => Some(*at),
            _ => None,
        })
        .unwrap();
    let b = leading_at(log.records())
        .into_iter()
        .find(|(r, _)| r == "b")
        .expect("b took over");
    assert!(b.1 > dropped);
    // Within the renew deadline (10 s) and a retry period of the partition, not at the end of
    // the 50 s reconcile.
    assert!(
        dropped - partitioned <= Duration::from_secs(12),
        "{:?}",
        dropped - partitioned
    );
}

/// Each lost lease reports the reconciles that term dropped, not a running total: a replica that
/// loses the lease twice, each time with one reconcile in flight, reports one each time.
#[tokio::test(start_paused = true)]
async fn each_lost_lease_reports_the_reconciles_of_its_own_term() {
    let api = ScriptedSource::new();
    for k in 0..5 {
        api.apply(k);
    }
    let lost: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut harness = Harness::new(config());
    let slow = {
        let (source, lost) = (api.clone(), lost.clone());
        // 5 s each, so that one is in flight when the lease lapses 12 s after the last renew
        // (none starts after that instant).
        Controller::new("objects", |_key: u32, _ctx: Context| async {
            sleep(Duration::from_secs(5)).await;
            Ok::<_, Infallible>(Action::Done)
        })
        .source(move || source.subscribe())
        .workers(1)
        .on_event(move |e| {
            if let ctrlq_controller::Event::LeadershipLost { aborted } = e {
                lost.lock().unwrap().push(*aborted);
            }
        })
    };
    harness.spawn("solo", slow);
    for _ in 0..2 {
        // Leading with a reconcile in flight (the queue holds 5 keys of 5 s each).
        sleep(Duration::from_secs(1)).await;
        harness.partition("solo", true);
        sleep(Duration::from_secs(30)).await;
        harness.partition("solo", false);
        sleep(Duration::from_secs(30)).await;
        for k in 0..5 {
            api.apply(k);
        }
    }
    let summaries = bounded(LIMIT, harness.stop_all()).await;
    let summary = &summaries[0].1;
    assert_eq!(summary.leases_lost, 2);
    assert_eq!(
        *lost.lock().unwrap(),
        [1, 1],
        "one dropped reconcile per term"
    );
    assert!(summary.aborted >= 2);
}

/// `Harness::leader` names the replica that leads now: a partitioned former leader, which still
/// sees its own name in the last record it read, is not named once it stepped down, and the
/// replica that took over is.
#[tokio::test(start_paused = true)]
async fn the_harness_names_the_replica_leading_now_not_a_partitioned_former_leader() {
    let api = ScriptedSource::new();
    api.apply(1);
    let seen: Seen = Arc::default();
    let mut harness = Harness::new(config());
    harness.spawn("a", build(&api, &seen, 1));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(harness.leader().as_deref(), Some("a"));
    harness.spawn("b", build(&api, &seen, 2));
    harness.partition("a", true);
    // a steps down within retry period + renew deadline (12 s); b takes over after the lease.
    sleep(Duration::from_secs(13)).await;
    assert_eq!(harness.leader(), None, "a stepped down; b cannot lead yet");
    sleep(FAILOVER_BOUND).await;
    assert_eq!(harness.leader().as_deref(), Some("b"));
    sleep(Duration::from_secs(5)).await;
    assert_eq!(harness.leader().as_deref(), Some("b"));
    harness.stop_all().await;
}
