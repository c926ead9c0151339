//! A controller on real kube-runtime watches: kube-apiserver and etcd started by
//! `ctrlq-envtest` (binaries from `scripts/install-controlplane`), one
//! `Watch` of ConfigMaps feeding the keys and the store reconcile reads; then every kind of
//! source across a kube-apiserver restart, with an object deleted while it was down. Real time:
//! every wait is bounded.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::kube::{Object, Watch};
use ctrlq_controller::{Action, Context, Controller, Drain};
use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
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

    let config_maps = Watch::new(api.clone(), watcher::Config::default());
    let seen = Shared::default();
    let (reader, s) = (config_maps.clone(), seen.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "configmaps",
        move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            record(&s, &reader, &key);
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .try_source(config_maps.keys())
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
    /// The version of the last known state of each object reconciled as deleted.
    deleted: HashMap<String, Option<String>>,
}

type Shared = Arc<Mutex<Counts>>;

/// Notes a reconcile of `key` at the version the watch holds (`None`: deleted), and the
/// deleted state it read.
fn record(shared: &Shared, watch: &Watch<ConfigMap>, key: &ObjectRef<ConfigMap>) {
    let object = watch.get(key);
    let version = object
        .present()
        .and_then(|cm| cm.metadata.resource_version.clone());
    if let Object::Deleted(last) = object {
        let last = last.and_then(|cm| cm.metadata.resource_version.clone());
        shared
            .lock()
            .unwrap()
            .deleted
            .insert(key.name.clone(), last);
    }
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

/// Keys (ConfigMaps), owners (Secrets owned by a ConfigMap), mapped (Secrets naming a
/// ConfigMap in their `parent` label) and resync (every 500 ms, over the ConfigMaps labelled
/// `resync`), each from its own `Watch` with kube-runtime's default backoff, across a
/// kube-apiserver kill and restart. Each change is one that only its source turns into a key,
/// made while the keys are quiet, before the restart and after it. While the API server is
/// down, ConfigMap `d` is deleted from etcd itself: no watch sees that as an event, and the
/// watcher, told that its resource version is gone (`410 Gone`: the restarted server's watch
/// cache begins after it), lists again. `d` is missing from the list, so it is reconciled as
/// deleted, with the state the store last held; the ConfigMap that nothing changes is
/// reconciled again by the relist.
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
    for name in ["a", "b", "c", "d", "r"] {
        let mut cm = config_map(name, "1");
        if name == "r" {
            cm.metadata.labels = Some([("resync".to_owned(), "yes".to_owned())].into());
        }
        let cm = config_maps.create(&pp, &cm).await.unwrap();
        versions.insert(name, cm);
    }

    let primary = Watch::new(config_maps.clone(), watcher::Config::default());
    let labelled = Watch::new(
        config_maps.clone(),
        watcher::Config::default().labels("resync"),
    );
    let owned = Watch::new(secrets.clone(), watcher::Config::default());
    let related = Watch::new(secrets.clone(), watcher::Config::default().labels("parent"));
    let shared = Shared::default();
    let (reader, s) = (primary.clone(), shared.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "configmaps",
        move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            record(&s, &reader, &key);
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .try_source(primary.keys())
    .try_source(owned.owners::<ConfigMap>())
    .try_source(related.mapped(|s: &Secret| {
        let parent = s.metadata.labels.as_ref().and_then(|l| l.get("parent"));
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        parent.map(|p| ObjectRef::<ConfigMap>::new(p).within(&ns))
    }))
    .try_source(labelled.resync(Duration::from_millis(500)))
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
    // `owners`: a Secret created with `a` as its owner reconciles `a` (nothing else touches it).
    let before = count(&shared, "a");
    let a = &versions["a"];
    secrets
        .create(&pp, &secret("owned-by-a", Some(a), None, "1"))
        .await
        .unwrap();
    reconciled_more(&shared, "a", before).await;
    // `mapped`: a Secret labelled `parent: b` reconciles `b`.
    let before = count(&shared, "b");
    secrets
        .create(&pp, &secret("names-b", None, Some("b"), "1"))
        .await
        .unwrap();
    reconciled_more(&shared, "b", before).await;

    // The restart, with `d` deleted from etcd while the API server is down. Writing another
    // object first moves the store's resource version past the last one the watchers saw, so
    // the restarted watch cache begins after it.
    let before_restart = count(&shared, "c");
    create_namespace(&admin, "restart-other").await;
    plane.kill_apiserver();
    assert_eq!(
        plane.etcd_delete(&format!("/registry/configmaps/{ns}/d")),
        1
    );
    plane.start_apiserver().await;
    // The relist: `c`, which nothing changed, is reconciled again; `d` as deleted, with the
    // version the store last held.
    reconciled_more(&shared, "c", before_restart).await;
    reconciled_at(&shared, "d", None).await;
    let d_version = versions["d"].metadata.resource_version.clone();
    assert_eq!(shared.lock().unwrap().deleted.get("d"), Some(&d_version));
    assert!(config_maps.get_opt("d").await.unwrap().is_none());
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
    // Deleted after the restart: reconciled once more, as deleted.
    config_maps.delete("c", &Default::default()).await.unwrap();
    reconciled_at(&shared, "c", None).await;

    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
    // The watches failed while the API server was down, and said so.
    assert!(summary.source_errors >= 1, "{summary:?}");
    assert!(primary.status().errors >= 1);
    assert!(primary.status().lists >= 2, "{:?}", primary.status());
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
        .try_source(Watch::new(api.clone(), watcher::Config::default()).keys())
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

/// What each reconcile of one race run read: per ConfigMap, the versions in order (`None`:
/// deleted).
type Reads = Arc<Mutex<HashMap<String, Vec<Option<String>>>>>;

/// One race run (seed `seed`): 100 ConfigMaps exist, two replicas start on the in-memory lock
/// (the second a warm standby), and while they start 100 more are created and 200 updates land
/// on random ones, paced at random; halfway the leader is killed (its run dropped, no release)
/// and the standby takes over. Returns, per ConfigMap, the final version and what each
/// reconcile read.
async fn race_run(seed: u64) -> (HashMap<String, String>, Reads) {
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    let ns = format!("race-{seed}");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, &ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let pp = PostParams::default();
    let create = |i: usize| {
        let api = api.clone();
        async move {
            let cm = config_map(&format!("cm-{i}"), "0");
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
    };
    futures::stream::iter(0..100)
        .map(create)
        .buffer_unordered(8)
        .collect::<()>()
        .await;

    let store = MemoryStore::new();
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500));
    let reads = Reads::default();
    let replica = |id: &str| {
        let elector = Arc::new(LeaderElector::new(store.lock(id), config.clone()).unwrap());
        let watch = Watch::new(api.clone(), watcher::Config::default());
        let (reader, reads) = (watch.clone(), reads.clone());
        let run = Controller::new("race", move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            let read = reader.get(&key);
            let version = read
                .present()
                .and_then(|o| o.metadata.resource_version.clone());
            reads
                .lock()
                .unwrap()
                .entry(key.name)
                .or_default()
                .push(version);
            async { Ok::<_, Infallible>(Action::Done) }
        })
        .try_source(watch.keys())
        .leader_elector(elector.clone())
        .workers(4)
        .run(CancellationToken::new());
        (elector, tokio::spawn(run))
    };
    let (a, a_run) = replica("a");
    let (b, b_run) = replica("b");

    let mut rng = support::Rng::new(seed);
    let mut writes = Vec::new();
    for i in 0..300 {
        writes.push(if i % 3 == 0 { 100 + i / 3 } else { 1000 + i });
    }
    let mut created = 0;
    for (n, w) in writes.into_iter().enumerate() {
        if w < 1000 {
            create(w).await;
            created += 1;
        } else {
            let name = format!("cm-{}", rng.below(100 + created as u64));
            let mut cm = api.get(&name).await.unwrap();
            cm.data = Some([("value".to_owned(), format!("{n}"))].into());
            // A conflict with nothing else writing cannot happen: the read is the latest.
            api.replace(&name, &pp, &cm).await.unwrap();
        }
        if rng.below(4) == 0 {
            sleep(rng.millis(20)).await;
        }
        if n == 150 {
            // The leader dies mid-traffic; the other takes over once its lease expires.
            let leader = if a.is_leader() { &a_run } else { &b_run };
            leader.abort();
        }
    }
    let finals: HashMap<String, String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|cm| {
            let name = cm.metadata.name.unwrap();
            (name, cm.metadata.resource_version.unwrap())
        })
        .collect();
    assert_eq!(finals.len(), 200);
    // Every ConfigMap's last reconcile reads its final version, within 60 s.
    let settled = timeout(Duration::from_secs(60), async {
        loop {
            let all = {
                let reads = reads.lock().unwrap();
                finals.iter().all(|(name, version)| {
                    reads
                        .get(name)
                        .and_then(|r| r.last().cloned().flatten())
                        .is_some_and(|v| &v == version)
                })
            };
            if all {
                return;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let (a_leads, b_leads) = (a.is_leader(), b.is_leader());
    a_run.abort();
    b_run.abort();
    assert!(a_leads != b_leads, "one leader at the end");
    settled.unwrap_or_else(|_| {
        let reads = reads.lock().unwrap();
        let stale: Vec<_> = finals
            .iter()
            .filter(|(n, v)| {
                reads
                    .get(*n)
                    .and_then(|r| r.last().cloned().flatten())
                    .as_ref()
                    != Some(*v)
            })
            .collect();
        panic!(
            "seed {seed}: {} ConfigMaps not reconciled at their final version: {stale:?}",
            stale.len()
        )
    });
    (finals, reads)
}

/// The race of issue 58's report: objects created and updated while the controller starts and
/// while it fails over. With the store and the keys on one watch, every object's last version
/// is reconciled with the store holding it, and no reconcile that read an older version stands
/// as the last word. `CTRLQ_RACE_SEEDS` runs more seeds (the figures in the closing note ran
/// 20).
#[tokio::test]
async fn no_reconcile_reads_a_stale_object_as_the_last_word_across_start_and_failover() {
    let seeds: u64 = std::env::var("CTRLQ_RACE_SEEDS").map_or(1, |s| s.parse().unwrap());
    for seed in 1..=seeds {
        let (finals, reads) = race_run(seed).await;
        let reads = reads.lock().unwrap();
        let superseded: usize = reads
            .iter()
            .map(|(name, r)| r.iter().filter(|v| v.as_ref() != finals.get(name)).count())
            .sum();
        let total: usize = reads.values().map(Vec::len).sum();
        println!(
            "seed {seed}: {} objects, {total} reconciles, {superseded} read a version a later \
             write superseded (each followed by a reconcile at the newest)",
            finals.len()
        );
    }
}

/// A Deployment with one container, selected by `app: <name>`.
fn deployment(name: &str, image: &str) -> k8s_openapi::api::apps::v1::Deployment {
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    let labels: std::collections::BTreeMap<_, _> = [("app".to_owned(), name.to_owned())].into();
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        image: Some(image.into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// On the real API server, with the generation predicate: a status write (through the status
/// subresource, which leaves `metadata.generation` as it is) triggers no reconcile; a spec
/// change does, and so does the deletion.
#[tokio::test]
async fn a_status_write_does_not_trigger_a_reconcile_under_the_generation_predicate() {
    use ctrlq_controller::kube::predicates;
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
    let ns = "predicate";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<Deployment>::namespaced(admin.clone(), ns);
    let pp = PostParams::default();
    api.create(&pp, &deployment("web", "nginx:1"))
        .await
        .unwrap();

    let deployments = Watch::new(api.clone(), watcher::Config::default());
    // Per reconcile: the generation read, and whether the object was present.
    type Log = Arc<Mutex<Vec<(Option<i64>, bool)>>>;
    let reconciles = Log::default();
    let (reader, log) = (deployments.clone(), reconciles.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "deployments",
        move |key: ObjectRef<Deployment>, _ctx: Context| {
            let object = reader.get(&key);
            let generation = object.last_known().and_then(|d| d.metadata.generation);
            log.lock()
                .unwrap()
                .push((generation, object.present().is_some()));
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .try_source(deployments.with_predicate(predicates::generation).keys())
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    let reconciled = |n: usize| {
        let log = reconciles.clone();
        async move {
            timeout(Duration::from_secs(30), async {
                while log.lock().unwrap().len() < n {
                    sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{n} reconciles within 30 s: {:?}", log.lock().unwrap()));
        }
    };
    reconciled(1).await;

    // Two status writes: the watch delivers them (the store has them), no key is yielded.
    for replicas in [1, 2] {
        let mut d = api.get_status("web").await.unwrap();
        d.status = Some(DeploymentStatus {
            observed_generation: d.metadata.generation,
            replicas: Some(replicas),
            ..DeploymentStatus::default()
        });
        let written = api.replace_status("web", &pp, &d).await;
        let written = written.unwrap();
        timeout(Duration::from_secs(30), async {
            loop {
                let seen = deployments.store().get(&ObjectRef::from_obj(&written));
                if seen.and_then(|d| d.metadata.resource_version.clone())
                    == written.metadata.resource_version
                {
                    return;
                }
                sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the status write reaches the store within 30 s");
    }
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        reconciles.lock().unwrap().len(),
        1,
        "status writes triggered a reconcile"
    );

    // A spec change raises the generation: reconciled.
    let mut d = api.get("web").await.unwrap();
    d.spec.template.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
    api.replace("web", &pp, &d).await.unwrap();
    reconciled(2).await;
    api.delete("web", &Default::default()).await.unwrap();
    reconciled(3).await;
    shutdown.cancel();
    bounded(Duration::from_secs(60), run).await.unwrap();
    let log = reconciles.lock().unwrap();
    assert_eq!(
        log[..],
        [(Some(1), true), (Some(2), true), (Some(2), false)]
    );
}

/// An identity with no right to list ConfigMaps: every watch attempt is answered 403. The
/// controller does not start: after the sync timeout it returns, naming the watch and the 403;
/// the watch counted each failure and fails its health check.
#[tokio::test]
async fn a_watch_the_api_server_forbids_stops_the_start_with_the_403() {
    let ns = "forbidden";
    let plane = ControlPlane::shared().await;
    create_namespace(&plane.client(ADMIN), ns).await;
    let api = Api::<ConfigMap>::namespaced(plane.client("dave"), ns);
    let config_maps = Watch::new(api, watcher::Config::default());
    let run = Controller::for_watch("configmaps", &config_maps, |_key, _cm, _ctx| async {
        Ok::<_, Infallible>(Action::Done)
    })
    .sync_timeout(Duration::from_secs(5))
    .run(CancellationToken::new());
    let summary = bounded(Duration::from_secs(60), run).await;
    let not_synced = summary
        .not_synced
        .expect("the forbidden watch does not sync");
    assert_eq!(not_synced.name, "the watch of ConfigMap");
    let error = not_synced.last_error.expect("the 403 is named");
    assert!(error.contains("forbidden"), "{error}");
    assert_eq!(summary.reconciles, 0);
    let status = config_maps.status();
    assert!(status.errors >= 1 && !status.synced, "{status:?}");
    assert!(config_maps.check(Duration::from_secs(1)).is_err());
}

/// `kube::finalizer` on the real API server: the controller adds its finalizer to a new
/// ConfigMap, reconciles it (`Apply`), and on delete cleans up (`Cleanup`) and removes the
/// finalizer, after which the API server deletes the ConfigMap.
#[tokio::test]
async fn a_finalizer_is_added_then_cleaned_up_before_the_object_goes() {
    use ctrlq_controller::kube::{FinalizerEvent, finalizer};
    const FINALIZER: &str = "ctrlq.example/cleanup";
    let ns = "finalizer";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let config_maps = Watch::new(api.clone(), watcher::Config::default());
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let (log, client) = (events.clone(), admin.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::for_watch("finalizer", &config_maps, move |_key, object, _ctx| {
        let (log, client) = (log.clone(), client.clone());
        async move {
            finalizer(&client, FINALIZER, object, |event| async move {
                let (what, cm) = match event {
                    FinalizerEvent::Apply(cm) => ("apply", cm),
                    FinalizerEvent::Cleanup(cm) => ("cleanup", cm),
                };
                let name = cm.metadata.name.clone().unwrap_or_default();
                log.lock().unwrap().push(format!("{what} {name}"));
                Ok::<_, Infallible>(Action::Done)
            })
            .await
        }
    })
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    let pp = PostParams::default();
    api.create(&pp, &config_map("a", "1")).await.unwrap();
    let logged = |what: &'static str| {
        let events = events.clone();
        async move {
            timeout(Duration::from_secs(30), async {
                while !events.lock().unwrap().iter().any(|e| e == what) {
                    sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{what} within 30 s: {:?}", events.lock().unwrap()));
        }
    };
    logged("apply a").await;
    let finalizers = api.get("a").await.unwrap().metadata.finalizers;
    assert_eq!(finalizers, Some(vec![FINALIZER.to_owned()]));
    api.delete("a", &Default::default()).await.unwrap();
    logged("cleanup a").await;
    timeout(Duration::from_secs(30), async {
        while api.get_opt("a").await.unwrap().is_some() {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("deleted once the finalizer is removed");
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert_eq!(
        events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| *e == "cleanup a")
            .count(),
        1
    );
}

/// Live changes first on the real API server: 600 ConfigMaps listed, one worker whose
/// reconcile takes 20 ms (the list drains in about 12 s). A ConfigMap already reconciled from
/// the list is changed: its reconcile that reads the change comes while most of the list is
/// still queued (first in, first out, it would come after all of it).
#[tokio::test]
async fn a_live_change_is_reconciled_before_the_list_drains() {
    use futures::StreamExt;
    let ns = "live-first";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    let n = 600;
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let cm = config_map(&format!("cm-{i}"), "listed");
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .await;

    let config_maps = Watch::new(api.clone(), watcher::Config::default());
    // Each reconcile's ConfigMap and the value it read.
    let log: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let l = log.clone();
    let shutdown = CancellationToken::new();
    let run = Controller::for_watch(
        "live-first",
        &config_maps,
        move |key, object: Object<ConfigMap>, _ctx| {
            let value = object
                .present()
                .and_then(|cm| cm.data.as_ref()?.get("value").cloned())
                .unwrap_or_default();
            l.lock().unwrap().push((key.name.clone(), value));
            async {
                sleep(Duration::from_millis(20)).await;
                Ok::<_, Infallible>(Action::Done)
            }
        },
    )
    .workers(1)
    .run(shutdown.clone());
    let run = tokio::spawn(run);

    let first = bounded(Duration::from_secs(60), async {
        loop {
            if let Some((name, _)) = log.lock().unwrap().first() {
                break name.clone();
            }
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let mut changed = config_map(&first, "changed");
    changed.metadata.resource_version = None;
    api.replace(&first, &PostParams::default(), &changed)
        .await
        .unwrap();
    let position = bounded(Duration::from_secs(120), async {
        loop {
            let found = log
                .lock()
                .unwrap()
                .iter()
                .position(|(name, value)| *name == first && value == "changed");
            if let Some(p) = found {
                break p;
            }
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    shutdown.cancel();
    bounded(Duration::from_secs(60), run).await.unwrap();
    assert!(
        position < n / 2,
        "the change to {first} was reconciled after {position} listed keys of {n}"
    );
}

/// A hard deadline on the real API server: the first reconcile waits on a watch that sees no
/// event (a request that does not answer) and is dropped at its deadline; the error policy is
/// told, the key comes back after its backoff and the next reconcile finishes.
#[tokio::test]
async fn a_reconcile_stuck_on_a_request_is_dropped_at_its_hard_deadline() {
    use kube::api::WatchParams;
    let ns = "hard-deadline";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &config_map("slow", "1"))
        .await
        .unwrap();
    let config_maps = Watch::new(api.clone(), watcher::Config::default());
    let attempts: Arc<Mutex<Vec<(u32, std::time::Instant)>>> = Arc::default();
    let told: Arc<Mutex<Vec<String>>> = Arc::default();
    let (a, t) = (attempts.clone(), told.clone());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::for_watch(
        "hard-deadline",
        &config_maps,
        move |_key, _object: Object<ConfigMap>, ctx: Context| {
            a.lock()
                .unwrap()
                .push((ctx.attempts(), std::time::Instant::now()));
            let (api, stop) = (api.clone(), stop.clone());
            async move {
                if ctx.attempts() == 0 {
                    // Events of a name that does not exist: none comes.
                    let params = WatchParams::default().fields("metadata.name=nothing");
                    let mut events = api.watch(&params, "0").await?.boxed();
                    while events.next().await.is_some() {}
                }
                stop.cancel();
                Ok::<_, kube::Error>(Action::Done)
            }
        },
    )
    .hard_deadline(Duration::from_millis(500))
    .error_policy(move |_key, err, _attempts| {
        t.lock().unwrap().push(err.to_string());
        Action::RequeueRateLimited
    })
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    let attempts = attempts.lock().unwrap();
    assert_eq!(attempts.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [0, 1]);
    assert!(attempts[1].1 - attempts[0].1 >= Duration::from_millis(500));
    assert_eq!(
        *told.lock().unwrap(),
        ["reconcile dropped at its deadline, after 500ms"]
    );
    assert_eq!((summary.timeouts, summary.successes), (1, 1));
}

/// A key that keeps failing while its ConfigMap keeps changing (20 updates, one every 50 ms),
/// with `InBackoff::WaitOut` and a limiter of 200 ms doubling: it is retried only at the end
/// of each backoff (at most 1 + log2(t / 200 ms + 1) attempts in t), never once per update,
/// and once it is fixed, its next reconcile reads the last update.
#[tokio::test]
async fn a_failing_key_waits_out_its_backoff_whatever_the_updates() {
    use ctrlq_controller::InBackoff;
    use ctrlq_ratelimit::ExponentialRateLimiter;
    let ns = "wait-out";
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &config_map("broken", "0"))
        .await
        .unwrap();
    let config_maps = Watch::new(api.clone(), watcher::Config::default());
    // Each reconcile's failures so far, the value it read, and whether it was fixed then.
    let log: Arc<Mutex<Vec<(u32, String, bool)>>> = Arc::default();
    let l = log.clone();
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = fixed.clone();
    let limiter =
        ExponentialRateLimiter::new(Duration::from_millis(200), Duration::from_secs(60)).unwrap();
    let shutdown = CancellationToken::new();
    let run = Controller::for_watch(
        "wait-out",
        &config_maps,
        move |_key, object: Object<ConfigMap>, ctx: Context| {
            let value = object
                .present()
                .and_then(|cm| cm.data.as_ref()?.get("value").cloned())
                .unwrap_or_default();
            let fixed = f.load(std::sync::atomic::Ordering::SeqCst);
            l.lock().unwrap().push((ctx.attempts(), value, fixed));
            async move {
                if fixed {
                    Ok(Action::Done)
                } else {
                    Err("not yet")
                }
            }
        },
    )
    .in_backoff(InBackoff::WaitOut)
    .rate_limiter(limiter)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    bounded(Duration::from_secs(60), async {
        while log.lock().unwrap().is_empty() {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let start = std::time::Instant::now();
    for i in 1..=20 {
        let mut cm = config_map("broken", &i.to_string());
        cm.metadata.resource_version = None;
        api.replace("broken", &PostParams::default(), &cm)
            .await
            .unwrap();
        sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let attempts = log.lock().unwrap().len();
    let bound = 1 + (elapsed.as_secs_f64() / 0.2 + 1.0).log2().floor() as usize + 1;
    assert!(
        attempts <= bound,
        "{attempts} attempts in {elapsed:?} under 20 updates (at most {bound})"
    );
    fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    // Fixed: the key's next attempt, at the end of its current backoff, succeeds.
    bounded(Duration::from_secs(60), async {
        while log.lock().unwrap().last().is_none_or(|(.., fixed)| !fixed) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let log = log.lock().unwrap().clone();
    let (_, value, _) = log.last().unwrap();
    assert_eq!(value, "20", "the success reads the last update");
    let failures: Vec<u32> = log.iter().map(|(n, ..)| *n).collect();
    assert!(
        failures.windows(2).all(|w| w[1] == w[0] + 1),
        "the failure count only grows, one per attempt: {failures:?}"
    );
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert!(summary.successes >= 1, "{summary:?}");
}
