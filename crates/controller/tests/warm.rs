//! Warm standbys: a follower keeps its sources' keys, so a new leader (or a new shard owner)
//! starts reconciling as soon as it wins, without subscribing a source again; a follower never
//! reconciles; a standby's failing source is reported and resubscribed while it follows.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::shard::shard_of;
use ctrlq_controller::testing::{Harness, Observations, Record, ScriptedSource};
use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::LeaderElectionConfig;
use futures::StreamExt;
use support::{Rng, bounded};
use tokio::time::{Instant, sleep};

const LIMIT: Duration = Duration::from_secs(3600);

/// The bound on a failover after a crash: the lease, plus the longest jittered retry (2.2
/// retry periods), plus one retry period of observation slack (as in `replicas.rs`).
const FAILOVER_BOUND: Duration = Duration::from_millis(15_000 + 4_400 + 2_000);

/// What "at once" allows between winning and the first reconcile.
const AT_ONCE: Duration = Duration::from_millis(5);

/// The documented bound on settling after a replica dies (as in `sharding.rs`): lease duration
/// plus 4.2 retry periods plus the grace period (2 s).
const SETTLE_AFTER_A_DEATH: Duration = Duration::from_millis(15_000 + 4_200 * 2 + 2_000);

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default().release_on_cancel(true)
}

type Seen = Arc<Mutex<HashMap<u32, u64>>>;

/// Records the generation each object was last reconciled to; each reconcile takes `took`.
fn build(api: &ScriptedSource<u32>, seen: &Seen, took: Duration) -> Controller<u32, Infallible> {
    let (a, s) = (api.clone(), seen.clone());
    let source = api.clone();
    Controller::new("objects", move |key: u32, ctx: Context| {
        let (api, seen) = (a.clone(), s.clone());
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

/// The keys `replica` started reconciling at or after `since`.
fn started_by(log: &Observations<u32>, replica: &str, since: Instant) -> BTreeSet<u32> {
    log.starts()
        .filter(|(r, _, at)| *r == replica && *at >= since)
        .map(|(_, k, _)| *k)
        .collect()
}

/// When `replica` began leading (its first term).
fn leading_at(log: &Observations<u32>, replica: &str) -> Option<Instant> {
    log.records().iter().find_map(|r| match r {
        Record::Leading { replica: r, at, .. } if r == replica => Some(*at),
        _ => None,
    })
}

/// Waits (bounded) until someone other than `old` leads; returns who.
async fn next_leader(h: &Harness<u32>, old: &str, bound: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Some(l) = h.leader()
            && l != old
        {
            return l;
        }
        assert!(start.elapsed() <= bound, "no new leader within {bound:?}");
        sleep(Duration::from_millis(1)).await;
    }
}

/// A leader killed while 10,000 keys exist: the next leader's first reconcile comes within the
/// failover bound plus a few milliseconds, its term starts with every key from its warm view and
/// subscribes no source again (one subscription per replica in all); the replica that only ever
/// followed never reconciles.
#[tokio::test(start_paused = true)]
async fn a_new_leader_reconciles_at_once_from_its_warm_view_without_subscribing_again() {
    const KEYS: u32 = 10_000;
    let api = ScriptedSource::new();
    for k in 0..KEYS {
        api.apply(k);
    }
    let seen: Seen = Arc::default();
    let mut h = Harness::new(config());
    h.spawn("a", build(&api, &seen, Duration::from_millis(1)));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(h.leader().as_deref(), Some("a"));
    h.spawn("b", build(&api, &seen, Duration::from_millis(1)));
    h.spawn("c", build(&api, &seen, Duration::from_millis(1)));
    sleep(Duration::from_secs(2)).await;
    // Changes while b and c follow: in their views, reconciled by whoever leads next.
    for k in 0..100 {
        api.apply(k);
    }
    sleep(Duration::from_millis(500)).await;
    h.kill("a");
    let killed = Instant::now();
    let next = bounded(LIMIT, next_leader(&h, "a", FAILOVER_BOUND)).await;
    // Every key once more, at 4 reconciles of 1 ms at a time.
    sleep(Duration::from_secs(5)).await;
    let log = h.observations();
    bounded(LIMIT, h.stop_all()).await;

    let leading = leading_at(&log, &next).expect("the next leader's term");
    let first = log
        .starts()
        .find(|(r, _, _)| *r == next)
        .map(|(_, _, at)| at)
        .expect("the next leader reconciles");
    assert!(
        first - killed <= FAILOVER_BOUND + AT_ONCE,
        "first reconcile {:?} after the kill",
        first - killed
    );
    assert!(
        first - leading <= AT_ONCE,
        "{:?} after winning",
        first - leading
    );
    let warm: Vec<_> = log
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::WarmStart {
                replica,
                shard,
                keys,
                ..
            } if *replica == next => Some((*shard, *keys)),
            _ => None,
        })
        .collect();
    assert_eq!(
        warm,
        [(None, KEYS as usize)],
        "filled from the view at once"
    );
    let after = log
        .records()
        .iter()
        .find_map(|r| match r {
            Record::FirstReconcile { replica, after, .. } if *replica == next => Some(*after),
            _ => None,
        })
        .expect("the first reconcile is reported");
    assert!(after <= AT_ONCE, "{after:?}");
    assert_eq!(api.subscriptions(), 3, "once per replica, none per term");
    assert_eq!(started_by(&log, &next, leading).len(), KEYS as usize);
    let follower = if next == "b" { "c" } else { "b" };
    assert!(
        started_by(&log, follower, killed - Duration::from_secs(3600)).is_empty(),
        "a follower never reconciles"
    );
    assert_eq!(log.overlaps(), 0);
    let seen = seen.lock().unwrap();
    assert!((0..100).all(|k| seen.get(&k) == api.generation(&k).as_ref()));
}

/// A standby whose source fails while it follows: the failure is reported, the source is
/// subscribed again after the backoff, and the term the standby later leads starts with every
/// key, those created after the failure included.
#[tokio::test(start_paused = true)]
async fn a_standbys_failed_source_is_resubscribed_and_its_term_starts_with_every_key() {
    let api = ScriptedSource::new();
    for k in 0..100 {
        api.apply(k);
    }
    let seen: Seen = Arc::default();
    let mut h = Harness::new(config());
    h.spawn("a", build(&api, &seen, Duration::from_millis(10)));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(h.leader().as_deref(), Some("a"));
    // b's first watch lists 50 keys, then expires.
    let b_subs = Arc::new(Mutex::new(0u32));
    let (source, subs) = (api.clone(), b_subs.clone());
    let b = build(&api, &seen, Duration::from_millis(10)).try_source(move || {
        let mut n = subs.lock().unwrap();
        *n += 1;
        if *n == 1 {
            source
                .subscribe()
                .take(50)
                .map(Ok)
                .chain(futures::stream::iter([Err("watch expired")]))
                .boxed()
        } else {
            source.subscribe().map(Ok).boxed()
        }
    });
    h.spawn("b", b);
    sleep(Duration::from_secs(3)).await;
    for k in 100..110 {
        api.apply(k);
    }
    sleep(Duration::from_secs(1)).await;
    h.kill("a");
    let killed = Instant::now();
    bounded(LIMIT, next_leader(&h, "a", FAILOVER_BOUND)).await;
    sleep(Duration::from_secs(2)).await;
    let log = h.observations();
    bounded(LIMIT, h.stop_all()).await;

    let leading = leading_at(&log, "b").unwrap();
    let failed: Vec<_> = log
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::SourceFailed {
                replica,
                source,
                at,
                ..
            } => Some((replica.as_str(), *source, *at)),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, "b");
    assert_eq!(failed[0].1, 1, "b's second source");
    assert!(failed[0].2 < killed, "while following");
    assert_eq!(
        *b_subs.lock().unwrap(),
        2,
        "subscribed again, and not per term"
    );
    let warm = log.records().iter().find_map(|r| match r {
        Record::WarmStart { replica, keys, .. } if replica == "b" => Some(*keys),
        _ => None,
    });
    assert_eq!(warm, Some(110), "b's term starts with every key");
    assert_eq!(started_by(&log, "b", leading), (0..110).collect());
    assert!(started_by(&log, "b", killed - Duration::from_secs(3600)).len() == 110);
    let seen = seen.lock().unwrap();
    assert!((0..110).all(|k| seen.get(&k) == api.generation(&k).as_ref()));
}

/// Sharded: after a kill, the survivors re-hold every shard; each gained shard's term starts
/// with its keys from the gaining replica's warm view, and no source is subscribed again; no
/// key is ever in two reconciles at once, and every key is reconciled after its last change.
#[tokio::test(start_paused = true)]
async fn a_gained_shard_is_filled_from_the_warm_view_without_a_relist() {
    const KEYS: u32 = 300;
    const SHARDS: u32 = 12;
    let api = ScriptedSource::new();
    for k in 0..KEYS {
        api.apply(k);
    }
    let seen: Seen = Arc::default();
    let mut rng = Rng::new(7);
    let mut h = Harness::new(LeaderElectionConfig::default());
    for id in ["a", "b", "c"] {
        h.spawn_sharded(id, build(&api, &seen, Duration::from_millis(20)), SHARDS);
    }
    let settle = |h: &Harness<u32>, ids: &[&str], want: usize| {
        let all = ids.iter().map(|id| h.shards_held(id)).collect::<Vec<_>>();
        all.iter().all(|s| s.len() == want)
            && all.iter().map(BTreeSet::len).sum::<usize>() == SHARDS as usize
    };
    let start = Instant::now();
    while !settle(&h, &["a", "b", "c"], 4) {
        assert!(start.elapsed() <= Duration::from_secs(60), "not settled");
        sleep(Duration::from_millis(100)).await;
    }
    let a_shards = h.shards_held("a");
    h.kill("a");
    let killed = Instant::now();
    while !settle(&h, &["b", "c"], 6) {
        assert!(killed.elapsed() <= SETTLE_AFTER_A_DEATH, "not re-held");
        // Changes all along, the shards without a holder included.
        api.apply(u32::try_from(rng.below(u64::from(KEYS))).unwrap());
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_secs(5)).await;
    let log = h.observations();
    bounded(LIMIT, h.stop_all()).await;

    assert_eq!(log.key_overlaps(), 0, "no key in two reconciles at once");
    assert_eq!(
        api.subscriptions(),
        3,
        "once per replica, none per gained shard"
    );
    let gained: Vec<_> = log
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::WarmStart {
                replica,
                shard: Some(shard),
                keys,
                at,
            } if *at >= killed => Some((replica.clone(), *shard, *keys)),
            _ => None,
        })
        .collect();
    let moved: BTreeSet<u32> = gained.iter().map(|(_, s, _)| *s).collect();
    // A survivor may also hand one of its own to the other as the assignment settles.
    assert!(
        a_shards.is_subset(&moved),
        "a's shards {a_shards:?} were gained, filled warm: {moved:?}"
    );
    for (replica, shard, keys) in &gained {
        assert_ne!(replica, "a");
        let of_shard = (0..KEYS).filter(|k| shard_of(k, SHARDS) == *shard).count();
        assert_eq!(*keys, of_shard, "shard {shard}: every key of the shard");
    }
    let seen = seen.lock().unwrap();
    let objects = api.objects();
    assert!(
        objects.iter().all(|(k, g)| seen.get(k) == Some(g)),
        "every key reconciled after its last change"
    );
}

/// A lone replica that loses its lease and leads again: warm, its source is subscribed once and
/// the second term starts from the view; cold, each term subscribes it anew.
#[tokio::test(start_paused = true)]
async fn a_cold_standby_subscribes_per_term_and_a_warm_one_once() {
    for warm in [true, false] {
        let api = ScriptedSource::new();
        for k in 0..5 {
            api.apply(k);
        }
        let seen: Seen = Arc::default();
        let mut h = Harness::new(config());
        h.spawn(
            "solo",
            build(&api, &seen, Duration::from_millis(10)).warm_standby(warm),
        );
        sleep(Duration::from_secs(1)).await;
        h.partition("solo", true);
        sleep(Duration::from_secs(30)).await;
        h.partition("solo", false);
        sleep(Duration::from_secs(60)).await;
        let summaries = bounded(LIMIT, h.stop_all()).await;
        let terms = summaries[0].1.terms;
        assert!(terms >= 2, "{terms}");
        let log = h.observations();
        // The first term may start before the source listed (then with fewer keys).
        let warm_starts: Vec<usize> = log
            .records()
            .iter()
            .filter_map(|r| match r {
                Record::WarmStart { keys, .. } => Some(*keys),
                _ => None,
            })
            .collect();
        if warm {
            assert_eq!(api.subscriptions(), 1);
            assert_eq!(warm_starts.len() as u64, terms);
            assert_eq!(
                warm_starts.last(),
                Some(&5),
                "the second term starts with every key"
            );
        } else {
            assert_eq!(api.subscriptions() as u64, terms);
            assert!(warm_starts.is_empty());
        }
    }
}

/// The documented cost of deletions: a deleted object's key stays in a follower's view for the
/// run, so the term it leads next starts with it too and reconciles it once (finding the object
/// gone), and the view does not shrink.
#[tokio::test(start_paused = true)]
async fn a_deleted_objects_key_stays_in_the_view_and_is_reconciled_once_more() {
    let api = ScriptedSource::new();
    for k in 0..10 {
        api.apply(k);
    }
    let seen: Seen = Arc::default();
    let mut h = Harness::new(config());
    h.spawn("a", build(&api, &seen, Duration::from_millis(1)));
    sleep(Duration::from_secs(1)).await;
    h.spawn("b", build(&api, &seen, Duration::from_millis(1)));
    sleep(Duration::from_secs(1)).await;
    api.delete(&3);
    sleep(Duration::from_secs(1)).await;
    h.kill("a");
    let killed = Instant::now();
    let next = bounded(LIMIT, next_leader(&h, "a", FAILOVER_BOUND)).await;
    assert_eq!(next, "b");
    sleep(Duration::from_secs(1)).await;
    let log = h.observations();
    bounded(LIMIT, h.stop_all()).await;
    let warm = log.records().iter().find_map(|r| match r {
        Record::WarmStart { replica, keys, .. } if replica == "b" => Some(*keys),
        _ => None,
    });
    assert_eq!(
        warm,
        Some(10),
        "the deleted object's key is still in the view"
    );
    let reconciled = started_by(&log, "b", killed);
    assert_eq!(reconciled, (0..10).collect::<BTreeSet<u32>>());
    assert_eq!(api.generation(&3), None);
}
