//! A controller on real kube-runtime watches: kube-apiserver and etcd started by the leader
//! crate's `support/control_plane.rs` (binaries from `scripts/install-controlplane`), a
//! reflector over a watcher of ConfigMaps feeding `primary`, reconcile reading the store; then
//! all four sources across a kube-apiserver restart. Real time: every wait is bounded.

#[path = "../../leader/tests/support/control_plane.rs"]
mod control_plane;
mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control_plane::{ADMIN, ControlPlane, create_namespace};
use ctrlq_controller::kube::{owned, primary, related, resync};
use ctrlq_controller::{Action, Context, Controller, Drain};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use support::bounded;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

/// Objects there before the watch, created, changed and deleted during it: each is reconciled
/// at its latest version, the deleted one seen gone; the controller drains on shutdown.
#[tokio::test]
async fn a_controller_on_a_real_watch_reconciles_every_change() {
    let ns = "controller-watch";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let pp = PostParams::default();
    let a = api.create(&pp, &config_map("a", "1")).await.unwrap();

    let (store, writer) = reflector::store::<ConfigMap>();
    let events = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let once = Arc::new(Mutex::new(Some(events.boxed())));
    let seen = Shared::default();
    let (reader, s) = (store.clone(), seen.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "configmaps",
        move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            record(&s, &reader, &key);
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .source(move || primary(once.lock().unwrap().take().expect("one term")))
    .workers(2)
    .run(shutdown.clone());
    let run = tokio::spawn(run);

    // Listed at the start.
    reconciled_at(&seen, "a", a.metadata.resource_version.as_deref()).await;
    // Created, then changed, during the watch.
    let b = api.create(&pp, &config_map("b", "1")).await.unwrap();
    reconciled_at(&seen, "b", b.metadata.resource_version.as_deref()).await;
    let mut changed = a.clone();
    changed.data = Some([("value".to_owned(), "2".to_owned())].into());
    let a2 = api.replace("a", &pp, &changed).await.unwrap();
    assert_ne!(a2.metadata.resource_version, a.metadata.resource_version);
    reconciled_at(&seen, "a", a2.metadata.resource_version.as_deref()).await;
    // Deleted: reconciled once more, gone from the store.
    api.delete("b", &Default::default()).await.unwrap();
    reconciled_at(&seen, "b", None).await;

    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
}

/// How often each ConfigMap was reconciled, and the version it was last reconciled at.
#[derive(Default)]
struct Counts {
    seen: HashMap<String, (usize, Option<String>)>,
}

type Shared = Arc<Mutex<Counts>>;

/// Notes a reconcile of `key` at the version `store` holds (`None`: gone).
fn record(shared: &Shared, store: &reflector::Store<ConfigMap>, key: &ObjectRef<ConfigMap>) {
    let version = store
        .get(key)
        .and_then(|cm| cm.metadata.resource_version.clone());
    let mut counts = shared.lock().unwrap();
    let seen = counts.seen.entry(key.name.clone()).or_default();
    *seen = (seen.0 + 1, version);
}

fn count(shared: &Shared, name: &str) -> usize {
    shared.lock().unwrap().seen.get(name).map_or(0, |s| s.0)
}

/// Waits (at most 60 s) until `done` holds of the counts.
async fn until(shared: &Shared, what: &str, done: impl Fn(&Counts) -> bool) {
    timeout(Duration::from_secs(60), async {
        while !done(&shared.lock().unwrap()) {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let seen = &shared.lock().unwrap().seen;
        panic!("{what} within 60 s: {seen:?}")
    });
}

async fn reconciled_more(shared: &Shared, name: &str, than: usize) {
    until(shared, &format!("{name} reconciled again"), |c| {
        c.seen.get(name).is_some_and(|s| s.0 > than)
    })
    .await;
}

async fn reconciled_at(shared: &Shared, name: &str, version: Option<&str>) {
    until(shared, &format!("{name} reconciled at {version:?}"), |c| {
        c.seen.get(name).is_some_and(|s| s.1.as_deref() == version)
    })
    .await;
}

fn secret(name: &str, owner: Option<&ConfigMap>, parent: Option<&str>, value: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: o.metadata.name.clone().unwrap(),
                    uid: o.metadata.uid.clone().unwrap(),
                    ..OwnerReference::default()
                }]
            }),
            labels: parent.map(|p| [("parent".to_owned(), p.to_owned())].into()),
            ..ObjectMeta::default()
        },
        string_data: Some([("value".to_owned(), value.to_owned())].into()),
        ..Secret::default()
    }
}

/// `primary` (ConfigMaps), `owned` (Secrets owned by a ConfigMap), `related` (Secrets naming a
/// ConfigMap in their `parent` label) and `resync` (every 500 ms, over the ConfigMaps labelled
/// `resync`), each on its own watcher with kube-runtime's default backoff, across a
/// kube-apiserver kill and restart. Each change is one that only its source turns into a key,
/// made while the keys are quiet, before the restart and after it. The ConfigMap that nothing
/// changes is reconciled again after the restart: the watcher, told that its resource version
/// is gone (`410 Gone`: the restarted server's watch cache begins after it), lists again.
#[tokio::test]
async fn every_source_keeps_its_keys_flowing_across_an_apiserver_restart() {
    let ns = "restart";
    // A control plane of its own: the restart would disturb other tests.
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let secrets = Api::<Secret>::namespaced(admin.clone(), ns);
    let pp = PostParams::default();
    let mut versions = HashMap::new();
    for name in ["a", "b", "c", "r"] {
        let mut cm = config_map(name, "1");
        if name == "r" {
            cm.metadata.labels = Some([("resync".to_owned(), "yes".to_owned())].into());
        }
        let cm = config_maps.create(&pp, &cm).await.unwrap();
        versions.insert(name, cm);
    }

    let (store, writer) = reflector::store::<ConfigMap>();
    let watch = watcher(config_maps.clone(), watcher::Config::default()).default_backoff();
    let events = reflector::reflector(writer, watch);
    let once = Arc::new(Mutex::new(Some(events.boxed())));
    let (resync_store, resync_writer) = reflector::store::<ConfigMap>();
    let resync_watch = watcher(
        config_maps.clone(),
        watcher::Config::default().labels("resync"),
    )
    .default_backoff();
    let resync_events =
        tokio::spawn(reflector::reflector(resync_writer, resync_watch).for_each(|_| async {}));
    let shared = Shared::default();
    let (reader, s) = (store.clone(), shared.clone());
    let (owned_api, related_api) = (secrets.clone(), secrets.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "configmaps",
        move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            record(&s, &reader, &key);
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .source(move || primary(once.lock().unwrap().take().expect("one subscription")))
    .source(move || {
        owned::<ConfigMap, _, _, _>(
            watcher(owned_api.clone(), watcher::Config::default()).default_backoff(),
        )
    })
    .source(move || {
        let watch = watcher(
            related_api.clone(),
            watcher::Config::default().labels("parent"),
        )
        .default_backoff();
        related(watch, |s: &Secret| {
            let parent = s.metadata.labels.as_ref().and_then(|l| l.get("parent"));
            let ns = s.metadata.namespace.clone().unwrap_or_default();
            parent.map(|p| ObjectRef::<ConfigMap>::new(p).within(&ns))
        })
    })
    .source(move || resync(resync_store.clone(), Duration::from_millis(500)))
    .workers(2)
    .run(shutdown.clone());
    let run = tokio::spawn(run);

    // Listed at the start: every ConfigMap at the version it was created with.
    for (name, cm) in &versions {
        reconciled_at(&shared, name, cm.metadata.resource_version.as_deref()).await;
    }
    // Each source on its own, before the restart. `resync`: `r` again and again.
    let r = count(&shared, "r");
    reconciled_more(&shared, "r", r + 1).await;
    // `owned`: a Secret created with `a` as its owner reconciles `a` (nothing else touches it).
    let before = count(&shared, "a");
    let a = &versions["a"];
    secrets
        .create(&pp, &secret("owned-by-a", Some(a), None, "1"))
        .await
        .unwrap();
    reconciled_more(&shared, "a", before).await;
    // `related`: a Secret labelled `parent: b` reconciles `b`.
    let before = count(&shared, "b");
    secrets
        .create(&pp, &secret("names-b", None, Some("b"), "1"))
        .await
        .unwrap();
    reconciled_more(&shared, "b", before).await;

    // The restart. Writing another object first moves the store's resource version past the
    // last one the watchers saw, so the restarted watch cache begins after it.
    let before_restart = count(&shared, "c");
    create_namespace(&admin, "restart-other").await;
    plane.restart_apiserver().await;
    // The relist: `c`, which nothing changed, is reconciled again.
    reconciled_more(&shared, "c", before_restart).await;
    // Let the relists of the other watchers end before counting again.
    sleep(Duration::from_secs(3)).await;

    // Each source on its own, after the restart.
    let r = count(&shared, "r");
    reconciled_more(&shared, "r", r + 1).await;
    let mut changed = versions["c"].clone();
    changed.data = Some([("value".to_owned(), "2".to_owned())].into());
    changed.metadata.resource_version = None;
    let c2 = config_maps.replace("c", &pp, &changed).await.unwrap();
    reconciled_at(&shared, "c", c2.metadata.resource_version.as_deref()).await;
    let before = count(&shared, "a");
    secrets
        .replace("owned-by-a", &pp, &secret("owned-by-a", Some(a), None, "2"))
        .await
        .unwrap();
    reconciled_more(&shared, "a", before).await;
    let before = count(&shared, "b");
    secrets
        .replace("names-b", &pp, &secret("names-b", None, Some("b"), "2"))
        .await
        .unwrap();
    reconciled_more(&shared, "b", before).await;
    // Deleted after the restart: reconciled once more, gone from the store.
    config_maps.delete("c", &Default::default()).await.unwrap();
    reconciled_at(&shared, "c", None).await;

    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
    resync_events.abort();
}

/// Two replicas elected on the in-memory lock (LD 4 s, RD 3 s, RP 0.5 s), each sourcing a
/// kube-runtime watcher of 300 ConfigMaps; the leader is killed (its run dropped, no release).
/// Returns the ConfigMap LIST requests the API server served from the kill until the next
/// leader had reconciled every ConfigMap.
async fn lists_on_failover(warm: bool) -> f64 {
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    const KEYS: usize = 300;
    let ns = "failover";
    // A control plane of its own: the LIST count is the API server's, for every namespace.
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    futures::stream::iter(0..KEYS)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm = config_map(&format!("cm-{i}"), "1");
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    let lists = || {
        plane.metric(
            "apiserver_request_total",
            &["resource=\"configmaps\"", "verb=\"LIST\""],
        )
    };

    let store = MemoryStore::new();
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500));
    let reconciled: Arc<Mutex<HashMap<String, std::collections::HashSet<String>>>> = Arc::default();
    let replica = |id: &str| {
        let elector = Arc::new(LeaderElector::new(store.lock(id), config.clone()).unwrap());
        let (me, seen, api) = (id.to_owned(), reconciled.clone(), api.clone());
        let run = Controller::new(
            "configmaps",
            move |key: ObjectRef<ConfigMap>, _ctx: Context| {
                let mut seen = seen.lock().unwrap();
                seen.entry(me.clone()).or_default().insert(key.name);
                async { Ok::<_, Infallible>(Action::Done) }
            },
        )
        .source(move || primary(watcher(api.clone(), watcher::Config::default()).default_backoff()))
        .warm_standby(warm)
        .leader_elector(elector.clone())
        .workers(2)
        .run(CancellationToken::new());
        (elector, tokio::spawn(run))
    };
    let count = |id: &str| reconciled.lock().unwrap().get(id).map_or(0, |s| s.len());
    let (a, a_run) = replica("a");
    timeout(Duration::from_secs(60), async {
        while !(a.is_leader() && count("a") == KEYS) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leads and reconciles every ConfigMap within 60 s");
    let (_b, b_run) = replica("b");
    // Long enough for a warm standby's watch to list.
    sleep(Duration::from_secs(3)).await;
    assert_eq!(count("b"), 0, "a follower reconciled");

    let before = lists().await;
    a_run.abort();
    timeout(Duration::from_secs(60), async {
        while count("b") < KEYS {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("b reconciles every ConfigMap within 60 s of the kill");
    let listed = lists().await - before;
    b_run.abort();
    listed
}

/// A warm standby's term starts from the view its watch filled while following: the failover
/// lists nothing. A cold one lists when its term subscribes.
#[tokio::test]
async fn a_warm_standby_takes_over_without_listing_again() {
    assert_eq!(lists_on_failover(true).await, 0.0, "warm");
    assert!(lists_on_failover(false).await >= 1.0, "cold");
}
