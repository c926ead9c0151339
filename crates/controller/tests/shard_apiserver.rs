//! Server-side sharded list and watch (KEP-5866) on a real kube-apiserver: the objects the
//! server returns for a shard selector are exactly those our shard functions put in those
//! shards, by namespace and by uid; a sharded `Watch` holds only its shards, from the list and
//! live; with the feature gate off the watch filters by itself and says so; and replicas on
//! `Watch::for_shards` each watch only the shards they hold, through a join, names re-created,
//! a restart without the gate and a death. Control planes
//! from `ctrlq-envtest` (binaries from `scripts/install-controlplane`); real time, every wait
//! bounded.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::kube::{Object, Watch, shard_client};
use ctrlq_controller::shard::{ShardField, ShardSelector, Sharding, field_hash, shard_of_hash};
use ctrlq_controller::{Action, Context, Controller};
use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use ctrlq_leader::{LeaderElectionConfig, LeaseLock};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use support::bounded;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

const GATE: &str = "--feature-gates=ShardedListAndWatch=true";

/// One control plane with the gate on for the tests of this binary that need it.
async fn gated() -> &'static ControlPlane {
    static PLANE: OnceCell<ControlPlane> = OnceCell::const_new();
    PLANE.get_or_init(|| ControlPlane::start_with([GATE])).await
}

/// `namespaces` namespaces named `{i}-{suffix}`, each with `per` ConfigMaps. The number comes
/// first: FNV-1a moves its high bits little for a last byte, so names that differ only at their
/// end share a shard (see `ShardField::Namespace`).
async fn fill(admin: &Client, suffix: &str, namespaces: usize, per: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..namespaces {
        let ns = format!("{i}-{suffix}");
        create_namespace(admin, &ns).await;
        let api = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
        for j in 0..per {
            api.create(&PostParams::default(), &config_map(&format!("cm-{j}")))
                .await
                .unwrap();
        }
        names.push(ns);
    }
    names
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// `namespace/name` of each ConfigMap in the namespaces ending with `-{suffix}`.
fn keys<'a>(items: impl IntoIterator<Item = &'a ConfigMap>, suffix: &str) -> BTreeSet<String> {
    let ending = format!("-{suffix}");
    items
        .into_iter()
        .filter(|cm| cm.namespace().is_some_and(|ns| ns.ends_with(&ending)))
        .map(|cm| format!("{}/{}", cm.namespace().unwrap(), cm.name_any()))
        .collect()
}

/// The raw list of ConfigMaps with `selector`: its keys and its `metadata.shardInfo.selector`.
async fn raw_list(
    client: &Client,
    selector: &ShardSelector,
    suffix: &str,
) -> (BTreeSet<String>, Option<String>) {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", &selector.to_string())
        .finish();
    let request = http::Request::get(format!("/api/v1/configmaps?{query}"))
        .body(Vec::new())
        .unwrap();
    let list: serde_json::Value = client.request(request).await.unwrap();
    let items: Vec<ConfigMap> = serde_json::from_value(list["items"].clone()).unwrap();
    let echoed = list["metadata"]["shardInfo"]["selector"]
        .as_str()
        .map(str::to_owned);
    (keys(&items, suffix), echoed)
}

/// For both fields, each of 4 shards and a union of two apart: the server lists exactly the
/// objects our hash puts there (computed from the full list), echoes the selector, and the
/// shards tile the collection.
#[tokio::test]
async fn the_server_selects_exactly_the_objects_our_shards_hold() {
    let plane = gated().await;
    let admin = plane.client(ADMIN);
    let suffix = "tile";
    fill(&admin, suffix, 12, 4).await;
    let all = Api::<ConfigMap>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let everything = keys(&all, suffix);
    assert_eq!(everything.len(), 48);
    for field in [ShardField::Namespace, ShardField::Uid] {
        let mut union = BTreeSet::new();
        for held in [vec![0], vec![1], vec![2], vec![3], vec![0, 2]] {
            let selector = ShardSelector::for_shards(field, held.clone(), 4).unwrap();
            let expected = keys(all.iter().filter(|cm| selector.matches_object(*cm)), suffix);
            // The same, computed from the field as the runner would: shard_of_hash.
            let by_hash = keys(
                all.iter().filter(|cm| {
                    let value = match field {
                        ShardField::Namespace => cm.namespace().unwrap_or_default(),
                        ShardField::Uid => cm.uid().unwrap_or_default(),
                    };
                    held.contains(&shard_of_hash(field_hash(&value), 4))
                }),
                suffix,
            );
            assert_eq!(expected, by_hash);
            let (listed, echoed) = raw_list(&admin, &selector, suffix).await;
            assert_eq!(listed, expected, "{field:?} shards {held:?}: {selector}");
            assert_eq!(echoed.as_deref(), Some(&*selector.to_string()));
            // Through kube-rs's own list, on the shard client.
            let through_client = Api::<ConfigMap>::all(shard_client(admin.clone(), &selector))
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            assert_eq!(keys(&through_client, suffix), expected);
            if held.len() == 1 {
                assert!(union.is_disjoint(&listed), "{field:?}: shards overlap");
                union.extend(listed);
            }
        }
        assert_eq!(
            union, everything,
            "{field:?}: the 4 shards hold every object"
        );
    }
}

/// Waits until `watch`'s store holds exactly `expected` among the `suffix` namespaces.
async fn store_holds(watch: &Watch<ConfigMap>, expected: &BTreeSet<String>, suffix: &str) {
    let store = watch.store();
    bounded(Duration::from_secs(20), async {
        loop {
            let held = keys(store.state().iter().map(|cm| &**cm), suffix);
            if &held == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// A watch of one namespace shard of two, its keys subscribed: its store holds exactly that
/// shard's objects after the list and after live creates in every namespace.
async fn watch_one_shard(plane: &ControlPlane, suffix: &str) -> Watch<ConfigMap> {
    let admin = plane.client(ADMIN);
    let namespaces = fill(&admin, suffix, 8, 3).await;
    let selector = ShardSelector::for_shards(ShardField::Namespace, [1], 2).unwrap();
    let mine: Vec<&String> = namespaces
        .iter()
        .filter(|ns| selector.matches_value(ns))
        .collect();
    assert!(
        !mine.is_empty() && mine.len() < namespaces.len(),
        "both shards hold a namespace: {mine:?}"
    );
    let watch = Watch::<ConfigMap>::sharded(admin.clone(), watcher::Config::default(), selector);
    let mut keys_yielded = (watch.keys())();
    watch.synced(Duration::from_secs(20)).await.unwrap();
    let mut expected: BTreeSet<String> = mine
        .iter()
        .flat_map(|ns| (0..3).map(move |j| format!("{ns}/cm-{j}")))
        .collect();
    store_holds(&watch, &expected, suffix).await;
    for ns in &namespaces {
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &config_map("live"))
            .await
            .unwrap();
    }
    expected.extend(mine.iter().map(|ns| format!("{ns}/live")));
    store_holds(&watch, &expected, suffix).await;
    // The keys yielded of these namespaces are the shard's: the listed ones, then the live ones
    // (other tests' objects may share the shard).
    let ending = format!("-{suffix}");
    let mut yielded = BTreeSet::new();
    bounded(Duration::from_secs(20), async {
        while yielded != expected {
            let key = keys_yielded.next().await.unwrap().unwrap().key;
            let namespace = key.namespace.unwrap_or_default();
            if namespace.ends_with(&ending) {
                let key = format!("{namespace}/{}", key.name);
                assert!(expected.contains(&key), "{key} is not in the shard");
                yielded.insert(key);
            }
        }
    })
    .await;
    watch
}

#[tokio::test]
async fn a_sharded_watch_holds_only_its_shard_and_the_server_sends_nothing_else() {
    let plane = gated().await;
    let watch = watch_one_shard(plane, "gate-on").await;
    assert_eq!(watch.status().outside_shards, 0, "the server filtered");
}

/// The control plane the other tests start has the gate on; this one has it off: the server
/// lists everything without `shardInfo`, and the watch keeps the same objects by itself,
/// counting what it dropped.
#[tokio::test]
async fn without_the_gate_the_watch_filters_by_itself_and_counts_it() {
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    let watch = watch_one_shard(plane, "gate-off").await;
    assert!(
        watch.status().outside_shards > 0,
        "the server sent the other shard's objects, and they were dropped"
    );
    let selector = ShardSelector::for_shards(ShardField::Namespace, [1], 2).unwrap();
    let (listed, echoed) = raw_list(&admin, &selector, "gate-off").await;
    assert_eq!(
        echoed, None,
        "no shardInfo from a server that ignored the selector"
    );
    assert_eq!(listed.len(), 8 * 4, "every object listed");
}

/// One reconcile: the replica, the key, and the resource version it read (`None`: absent).
type Reconciled = (&'static str, String, Option<String>);

/// What the replicas of [`replicas_watch_only_the_shards_they_hold`] share: each reconcile
/// (replica, key, resource version read), the keys in a reconcile now, and the overlaps found.
#[derive(Clone, Default)]
struct Fleet {
    log: Arc<Mutex<Vec<Reconciled>>>,
    in_flight: Arc<Mutex<BTreeSet<String>>>,
    overlaps: Arc<AtomicUsize>,
    /// Each replica's last report of the shards no replica held.
    unowned: Arc<Mutex<HashMap<&'static str, Vec<u32>>>>,
    /// Every shard any report named.
    unowned_seen: Arc<Mutex<BTreeSet<u32>>>,
    /// The lists of a shard the server did not filter, as the runners reported them.
    unfiltered: Arc<AtomicUsize>,
}

struct Replica {
    watch: Watch<ConfigMap>,
    held: tokio::sync::watch::Receiver<BTreeSet<u32>>,
    stop: CancellationToken,
    run: tokio::task::JoinHandle<ctrlq_controller::Summary>,
}

const SHARDS: u32 = 4;
const LEASES: &str = "follow-leases";
const SUFFIX: &str = "follow";

fn replica(client: &Client, id: &'static str, fleet: &Fleet) -> Replica {
    let leases = client.clone();
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500));
    let sharding = Sharding::new(
        SHARDS,
        id,
        move |name: &str| LeaseLock::new(leases.clone(), LEASES, name, id),
        config,
    )
    .unwrap()
    .by_namespace();
    let watch =
        Watch::<ConfigMap>::for_shards(client.clone(), watcher::Config::default(), &sharding)
            .unwrap();
    let held = sharding.subscribe_held();
    let (f, unowned, seen, unfiltered) = (
        fleet.clone(),
        fleet.unowned.clone(),
        fleet.unowned_seen.clone(),
        fleet.unfiltered.clone(),
    );
    let controller = Controller::for_watch(
        SUFFIX,
        &watch,
        move |key: ObjectRef<ConfigMap>, cm: Object<ConfigMap>, _ctx: Context| {
            let f = f.clone();
            let key = format!("{}/{}", key.namespace.unwrap_or_default(), key.name);
            async move {
                if !f.in_flight.lock().unwrap().insert(key.clone()) {
                    f.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let version = cm.present().and_then(|cm| cm.resource_version());
                f.log.lock().unwrap().push((id, key.clone(), version));
                tokio::time::sleep(Duration::from_millis(20)).await;
                f.in_flight.lock().unwrap().remove(&key);
                Ok::<_, Infallible>(Action::Done)
            }
        },
    )
    .workers(2)
    .grace_period(Duration::from_secs(2))
    .on_event(move |e| match e {
        ctrlq_controller::Event::ShardsUnowned { shards, .. } => {
            unowned.lock().unwrap().insert(id, shards.to_vec());
            seen.lock().unwrap().extend(shards.iter().copied());
        }
        ctrlq_controller::Event::ShardSelectorIgnored { .. } => {
            unfiltered.fetch_add(1, Ordering::SeqCst);
        }
        _ => {}
    })
    .sharded(sharding);
    let stop = CancellationToken::new();
    let run = tokio::spawn(controller.run(stop.clone()));
    Replica {
        watch,
        held,
        stop,
        run,
    }
}

fn shard_of_namespace(namespace: &str) -> u32 {
    shard_of_hash(field_hash(namespace), SHARDS)
}

/// The test's ConfigMaps on the server: `namespace/name` → resource version.
async fn on_server(admin: &Client) -> BTreeMap<String, String> {
    let all = Api::<ConfigMap>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let ending = format!("-{SUFFIX}");
    all.iter()
        .filter(|cm| cm.namespace().is_some_and(|ns| ns.ends_with(&ending)))
        .map(|cm| {
            let key = format!("{}/{}", cm.namespace().unwrap(), cm.name_any());
            (key, cm.resource_version().unwrap())
        })
        .collect()
}

/// Waits until every test object's last reconcile read its version on the server.
async fn converged(admin: &Client, fleet: &Fleet) {
    bounded(Duration::from_secs(90), async {
        loop {
            let server = on_server(admin).await;
            let mut last: HashMap<String, Option<String>> = HashMap::new();
            for (_, key, version) in fleet.log.lock().unwrap().iter() {
                last.insert(key.clone(), version.clone());
            }
            if server
                .iter()
                .all(|(key, v)| last.get(key).is_some_and(|l| l.as_ref() == Some(v)))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// Waits until the replicas hold every shard between them, each at least one, and each
/// store holds exactly the test objects of its shards.
async fn split(admin: &Client, replicas: &[&Replica]) {
    bounded(Duration::from_secs(90), async {
        loop {
            let server = on_server(admin).await;
            let held: Vec<BTreeSet<u32>> =
                replicas.iter().map(|r| r.held.borrow().clone()).collect();
            let all: BTreeSet<u32> = held.iter().flatten().copied().collect();
            let disjoint = held.iter().map(BTreeSet::len).sum::<usize>() == all.len();
            let stores_hold = replicas.iter().zip(&held).all(|(r, held)| {
                let expected: BTreeSet<String> = server
                    .keys()
                    .filter(|k| held.contains(&shard_of_namespace(k.split('/').next().unwrap())))
                    .cloned()
                    .collect();
                keys(r.watch.store().state().iter().map(|cm| &**cm), SUFFIX) == expected
            });
            if all.len() == SHARDS as usize
                && disjoint
                && held.iter().all(|h| !h.is_empty())
                && stores_hold
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// Two replicas of a controller sharded by namespace over 4 shards, each on
/// `Watch::for_shards`, their shard and member records Leases on the same server: a joining
/// replica takes shards and each replica's store holds exactly its shards' objects, the server
/// filtering; names deleted and created again under load are reconciled by one replica at a
/// time to their last version; after a restart of kube-apiserver with the gate off, each
/// replica filters by itself and still holds only its shards; after one replica dies, its
/// shards are reported unowned and the other takes them within the bound, lists them and
/// reconciles every change; no key is ever in two reconciles at once, and the unowned report
/// ends empty.
#[tokio::test]
async fn replicas_watch_only_the_shards_they_hold() {
    let plane = ControlPlane::start_with([GATE]).await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, LEASES).await;
    let namespaces = fill(&admin, SUFFIX, 8, 3).await;
    let spread: BTreeSet<u32> = namespaces.iter().map(|ns| shard_of_namespace(ns)).collect();
    assert!(
        spread.len() >= 3,
        "the namespaces span the shards: {spread:?}"
    );
    let fleet = Fleet::default();

    let a = replica(&admin, "a", &fleet);
    bounded(Duration::from_secs(60), async {
        let mut held = a.held.clone();
        held.wait_for(|h| h.len() == SHARDS as usize).await.unwrap();
    })
    .await;
    converged(&admin, &fleet).await;

    let b = replica(&admin, "b", &fleet);
    split(&admin, &[&a, &b]).await;
    assert_eq!(a.watch.status().outside_shards, 0, "the server filtered");
    assert_eq!(b.watch.status().outside_shards, 0, "the server filtered");
    assert_eq!(fleet.unfiltered.load(Ordering::SeqCst), 0);

    // Names deleted and created again (new uids, the same keys), and changes, under load.
    for round in 0..4 {
        for ns in &namespaces {
            let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
            api.delete("cm-0", &DeleteParams::default()).await.unwrap();
            api.create(&PostParams::default(), &config_map("cm-0"))
                .await
                .unwrap();
            let mut cm = api.get("cm-1").await.unwrap();
            cm.data = Some([("round".to_owned(), round.to_string())].into());
            api.replace("cm-1", &PostParams::default(), &cm)
                .await
                .unwrap();
        }
    }
    converged(&admin, &fleet).await;

    // kube-apiserver again, without the gate: the replicas' watchers list again, each
    // receives every object and keeps only its shards'.
    plane.kill_apiserver();
    plane.start_apiserver_with::<_, String>([]).await;
    for ns in &namespaces {
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &config_map("after-restart"))
            .await
            .unwrap();
    }
    converged(&admin, &fleet).await;
    split(&admin, &[&a, &b]).await;
    let outside = a.watch.status().outside_shards + b.watch.status().outside_shards;
    assert!(
        outside > 0,
        "the server sent every object; the watches dropped the others'"
    );

    // b dies (its task dropped at once: no drain, no lease released): a finds its leases
    // stale, reports its shards unowned, takes them, lists them, and reconciles what changed
    // meanwhile.
    let b_shards = b.held.borrow().clone();
    b.run.abort();
    let _ = b.run.await;
    drop(b.watch);
    let died = std::time::Instant::now();
    for ns in &namespaces {
        let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
        let mut cm = api.get("cm-2").await.unwrap();
        cm.data = Some([("after".to_owned(), "b-left".to_owned())].into());
        api.replace("cm-2", &PostParams::default(), &cm)
            .await
            .unwrap();
    }
    bounded(Duration::from_secs(60), async {
        let mut held = a.held.clone();
        held.wait_for(|h| h.len() == SHARDS as usize).await.unwrap();
    })
    .await;
    // Taken within the bound after a death, LD + 4.2 RP + G = 4 + 2.1 + 2 s; with room.
    assert!(
        died.elapsed() < Duration::from_secs(16),
        "{:?}",
        died.elapsed()
    );
    let reported = fleet.unowned_seen.lock().unwrap().clone();
    assert!(
        b_shards.is_subset(&reported),
        "b's shards {b_shards:?} were reported unowned: {reported:?}"
    );
    converged(&admin, &fleet).await;
    // Listed (its keys reconciled): each list of b's shards was unfiltered, and said so.
    assert!(
        fleet.unfiltered.load(Ordering::SeqCst) >= b_shards.len(),
        "a listed b's shards without the gate, and said so"
    );
    let everything: BTreeSet<String> = on_server(&admin).await.into_keys().collect();
    store_holds(&a.watch, &everything, SUFFIX).await;
    bounded(Duration::from_secs(30), async {
        while fleet
            .unowned
            .lock()
            .unwrap()
            .get("a")
            .is_none_or(|u| !u.is_empty())
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    a.stop.cancel();
    bounded(Duration::from_secs(30), a.run).await.unwrap();
    assert_eq!(
        fleet.overlaps.load(Ordering::SeqCst),
        0,
        "a key in two reconciles at once"
    );
    let log = fleet.log.lock().unwrap();
    let by: BTreeSet<&str> = log.iter().map(|(id, ..)| *id).collect();
    assert_eq!(by, ["a", "b"].into(), "both replicas reconciled");
}
