//! `kube::Watch` against scripted watch event streams: the store and the keys of one watch,
//! relists, deletions while the watch was down, errors, late subscriptions and the controller
//! wired on it, under paused time.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::kube::{Object, Watch, WatchError};
use ctrlq_controller::priority::{NORMAL, Queued};
use ctrlq_controller::{Action, Context, Controller, Drain};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use support::bounded;
use tokio::sync::mpsc;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

fn meta<K: Resource>(mut o: K, ns: &str, name: &str, version: &str) -> K {
    let m = o.meta_mut();
    m.namespace = Some(ns.into());
    m.name = Some(name.into());
    m.resource_version = Some(version.into());
    o
}

fn pod(name: &str, version: &str) -> Pod {
    meta(Pod::default(), "prod", name, version)
}

fn owner(kind: &str, api_version: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        ..OwnerReference::default()
    }
}

fn key(name: &str) -> ObjectRef<Pod> {
    ObjectRef::new(name).within("prod")
}

/// `key(name)` from a listing.
fn low(name: &str) -> Queued<ObjectRef<Pod>> {
    Queued::low(key(name))
}

/// `key(name)` from a live event.
fn live(name: &str) -> Queued<ObjectRef<Pod>> {
    Queued::new(key(name), NORMAL)
}

fn version<K: Resource>(o: &Object<K>) -> Option<&str> {
    o.last_known()?.meta().resource_version.as_deref()
}

/// A watch of pods whose events the test sends.
fn pods() -> (
    Watch<Pod>,
    mpsc::UnboundedSender<watcher::Result<Event<Pod>>>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (Watch::from_events(events), tx)
}

/// The keys (or errors) the stream has ready now, after the watch task has run.
async fn ready<T>(
    stream: &mut BoxStream<'static, Result<T, WatchError>>,
) -> Vec<Result<T, String>> {
    // Let the watch task take every event sent so far.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    while let Some(Some(item)) = stream.next().now_or_never() {
        out.push(item.map_err(|e| e.to_string()));
    }
    out
}

fn ok<T>(keys: Vec<Result<T, String>>) -> Vec<T> {
    keys.into_iter().map(|k| k.expect("a key")).collect()
}

/// A list cut short (the watcher started again before its end) leaves nothing behind: the store
/// holds what the next list holds.
#[tokio::test(start_paused = true)]
async fn a_list_cut_short_leaves_nothing_of_itself() {
    let (pods, tx) = pods();
    let mut keys = (pods.keys())();
    for event in [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::Init,
        Event::InitApply(pod("b", "1")),
        Event::InitDone,
    ] {
        tx.send(Ok(event)).unwrap();
    }
    assert_eq!(ok(ready(&mut keys).await), [low("b")]);
    let names: Vec<String> = pods
        .store()
        .state()
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["b"]);
}

/// Listed objects yield keys only once the list is complete and in the store; a change yields
/// its key once the store holds it; a delete once the store dropped it, with the deleted
/// state still readable.
#[tokio::test(start_paused = true)]
async fn each_key_is_yielded_after_the_store_holds_its_change() {
    let (pods, tx) = pods();
    let mut keys = (pods.keys())();
    tx.send(Ok(Event::Init)).unwrap();
    tx.send(Ok(Event::InitApply(pod("a", "1")))).unwrap();
    tx.send(Ok(Event::InitApply(pod("b", "2")))).unwrap();
    assert!(
        ready(&mut keys).await.is_empty(),
        "no key before the list is complete"
    );
    assert!(pods.store().is_empty());
    assert!(!pods.status().synced);

    tx.send(Ok(Event::InitDone)).unwrap();
    let mut listed = ok(ready(&mut keys).await);
    listed.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    assert_eq!(listed, [low("a"), low("b")]);
    assert_eq!(version(&pods.get(&key("a"))), Some("1"));
    assert!(pods.status().synced);
    assert_eq!(pods.status().lists, 1);

    tx.send(Ok(Event::Apply(pod("a", "3")))).unwrap();
    assert_eq!(ok(ready(&mut keys).await), [live("a")]);
    assert_eq!(version(&pods.get(&key("a"))), Some("3"));

    tx.send(Ok(Event::Delete(pod("b", "4")))).unwrap();
    assert_eq!(ok(ready(&mut keys).await), [live("b")]);
    let b = pods.get(&key("b"));
    assert!(b.present().is_none(), "{b:?}");
    assert_eq!(version(&b), Some("4"), "the deleted state is kept");
    assert!(pods.store().get(&key("b")).is_none());
}

/// An object missing from a relist was deleted while the watch was down: its key is yielded
/// with the relisted ones, and it reads as deleted with the state the store last held
/// (client-go's `DeletedFinalStateUnknown`). An object deleted and created again is present.
#[tokio::test(start_paused = true)]
async fn an_object_missing_from_a_relist_is_reconciled_as_deleted() {
    let (pods, tx) = pods();
    let mut keys = (pods.keys())();
    for e in [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::InitApply(pod("b", "2")),
        Event::InitDone,
        Event::Apply(pod("c", "3")),
    ] {
        tx.send(Ok(e)).unwrap();
    }
    assert_eq!(ready(&mut keys).await.len(), 3);
    // The watch broke; b was deleted meanwhile; the relist finds a and c.
    tx.send(Err(watcher::Error::NoResourceVersion)).unwrap();
    for e in [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::InitApply(pod("c", "5")),
        Event::InitDone,
    ] {
        tx.send(Ok(e)).unwrap();
    }
    let items = ready(&mut keys).await;
    assert!(
        items[0]
            .as_ref()
            .is_err_and(|e| e.starts_with("watch of Pod failed"))
    );
    let mut relisted = ok(items.into_iter().skip(1).collect());
    relisted.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    assert_eq!(relisted, [low("a"), low("b"), low("c")]);
    let b = pods.get(&key("b"));
    assert!(matches!(b, Object::Deleted(Some(_))), "{b:?}");
    assert_eq!(version(&b), Some("2"));
    assert_eq!(version(&pods.get(&key("c"))), Some("5"));
    assert_eq!(pods.status().lists, 2);

    // b created again: present, its deleted state forgotten.
    tx.send(Ok(Event::Apply(pod("b", "6")))).unwrap();
    assert_eq!(ok(ready(&mut keys).await), [live("b")]);
    assert_eq!(
        pods.get(&key("b")),
        Object::Present(Arc::new(pod("b", "6")))
    );
}

/// A subscription made after the list (a term of a cold standby, a source subscribed again)
/// starts from the store and the remembered deletions, and then follows the same watch: the
/// events are polled by one task, not listed again.
#[tokio::test(start_paused = true)]
async fn a_late_subscription_starts_from_the_store_then_follows_the_watch() {
    let (pods, tx) = pods();
    let mut first = (pods.keys())();
    for e in [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::InitApply(pod("b", "2")),
        Event::InitDone,
        Event::Delete(pod("b", "3")),
    ] {
        tx.send(Ok(e)).unwrap();
    }
    assert_eq!(ready(&mut first).await.len(), 3);
    let mut late = (pods.keys())();
    let mut snapshot = ok(ready(&mut late).await);
    snapshot.sort_by(|a, b| a.key.name.cmp(&b.key.name));
    assert_eq!(
        snapshot,
        [low("a"), low("b")],
        "the store and the deleted b"
    );
    tx.send(Ok(Event::Apply(pod("c", "4")))).unwrap();
    assert_eq!(ok(ready(&mut late).await), [live("c")]);
    assert_eq!(ok(ready(&mut first).await), [live("c")]);
    // A subscription dropped stops receiving; the others go on.
    drop(first);
    tx.send(Ok(Event::Apply(pod("a", "5")))).unwrap();
    assert_eq!(ok(ready(&mut late).await), [live("a")]);
}

/// A watcher error reaches every source of the watch as an `Err` item and the status; a watch
/// that fails for longer than the bound fails the health check, and any event ends the run of
/// errors.
#[tokio::test(start_paused = true)]
async fn watch_errors_are_yielded_counted_and_fail_the_health_check() {
    let (pods, tx) = pods();
    let mut keys = (pods.keys())();
    let mut owners = (pods.owners::<Deployment>())();
    tx.send(Err(watcher::Error::NoResourceVersion)).unwrap();
    let expected = "watch of Pod failed: no metadata.resourceVersion in watch result (does \
                    resource support watch?)";
    assert_eq!(ready(&mut keys).await, [Err(expected.to_owned())]);
    assert_eq!(ready(&mut owners).await, [Err(expected.to_owned())]);
    let status = pods.status();
    assert_eq!(status.errors, 1);
    assert!(status.failing_since.is_some());
    assert!(
        pods.check(Duration::from_secs(60)).is_ok(),
        "not failing long yet"
    );

    sleep(Duration::from_secs(61)).await;
    tx.send(Err(watcher::Error::NoResourceVersion)).unwrap();
    assert_eq!(ready(&mut keys).await.len(), 1);
    let unhealthy = pods.check(Duration::from_secs(60)).unwrap_err();
    assert_eq!(unhealthy.kind, "Pod");
    assert!(unhealthy.failing_for > Duration::from_secs(60));
    assert_eq!(pods.status().errors, 2);

    // `Init` comes before the watcher's list request: no answer yet. The list's end is one.
    tx.send(Ok(Event::Init)).unwrap();
    ready(&mut keys).await;
    assert!(pods.check(Duration::from_secs(60)).is_err());
    tx.send(Ok(Event::InitDone)).unwrap();
    ready(&mut keys).await;
    assert!(pods.check(Duration::from_secs(60)).is_ok());
    assert!(pods.status().failing_since.is_none());
    assert!(pods.status().last_error.is_some(), "kept after recovery");
}

/// A deleted object's last state is kept for the retention, then reads as deleted with none.
#[tokio::test(start_paused = true)]
async fn a_deleted_state_is_forgotten_after_the_retention() {
    let (pods, tx) = pods();
    let pods = pods.deleted_retention(Duration::from_secs(10));
    let mut keys = (pods.keys())();
    for e in [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::InitDone,
        Event::Delete(pod("a", "2")),
    ] {
        tx.send(Ok(e)).unwrap();
    }
    assert_eq!(ready(&mut keys).await.len(), 2);
    sleep(Duration::from_secs(9)).await;
    assert_eq!(version(&pods.get(&key("a"))), Some("2"));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(pods.get(&key("a")), Object::Deleted(None));
    // Forgotten deletions are not in a new subscription's snapshot either.
    assert!(ready(&mut (pods.keys())()).await.is_empty());
}

/// The watch task ends when the last handle is dropped: its event stream is dropped with it.
#[tokio::test(start_paused = true)]
async fn the_watch_ends_with_its_last_handle() {
    let (pods, tx) = pods();
    let keys = (pods.keys())();
    drop(keys);
    ready(&mut (pods.keys())()).await;
    assert!(!tx.is_closed(), "the watch runs");
    let clone = pods.clone();
    drop(pods);
    tokio::task::yield_now().await;
    assert!(!tx.is_closed(), "a clone keeps it");
    drop(clone);
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert!(tx.is_closed(), "the event stream was dropped");
}

/// A watch whose event stream ends ends every source of it, and later ones at once.
#[tokio::test(start_paused = true)]
async fn the_sources_end_when_the_event_stream_ends() {
    let events = [
        Event::Init,
        Event::InitApply(pod("a", "1")),
        Event::InitDone,
    ];
    let pods = Watch::from_events(futures::stream::iter(events.map(Ok::<_, watcher::Error>)));
    let keys: Vec<_> = bounded(Duration::from_secs(1), (pods.keys())().collect::<Vec<_>>()).await;
    assert_eq!(
        ok(keys
            .into_iter()
            .map(|k| k.map_err(|e| e.to_string()))
            .collect()),
        [low("a")]
    );
    let again: Vec<_> = bounded(Duration::from_secs(1), (pods.keys())().collect::<Vec<_>>()).await;
    assert_eq!(again.len(), 1, "the store's snapshot, then the end");
}

#[tokio::test(start_paused = true)]
async fn owners_map_children_to_their_owners_of_that_kind() {
    let mut rs1 = meta(ReplicaSet::default(), "prod", "web-1", "1");
    rs1.metadata.owner_references = Some(vec![owner("Deployment", "apps/v1", "web")]);
    let mut rs2 = meta(ReplicaSet::default(), "dev", "api-1", "2");
    rs2.metadata.owner_references = Some(vec![
        owner("Rollout", "argoproj.io/v1alpha1", "api"),
        owner("Deployment", "apps/v1", "api"),
    ]);
    let orphan = meta(ReplicaSet::default(), "prod", "lone", "3");
    let events: Vec<watcher::Result<Event<ReplicaSet>>> = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(rs1.clone())),
        Ok(Event::InitApply(orphan)),
        Ok(Event::InitDone),
        Ok(Event::Apply(rs2)),
        Ok(Event::Delete(rs1.clone())),
        // A relist that lacks rs2: deleted while the watch was down, its owner's key yielded.
        Ok(Event::Init),
        Ok(Event::InitApply(rs1)),
        Ok(Event::InitDone),
    ];
    let replica_sets = Watch::from_events(futures::stream::iter(events));
    let keys: Vec<_> = bounded(
        Duration::from_secs(1),
        (replica_sets.owners::<Deployment>())().collect::<Vec<_>>(),
    )
    .await;
    let mut keys: Vec<_> = keys.into_iter().map(Result::unwrap).collect();
    let web = ObjectRef::<Deployment>::new("web").within("prod");
    let api = ObjectRef::new("api").within("dev");
    let live = |key: &ObjectRef<Deployment>| Queued::new(key.clone(), NORMAL);
    assert_eq!(
        keys[..3],
        [Queued::low(web.clone()), live(&api), live(&web)],
        "listed, then applied and deleted"
    );
    keys[3..].sort_by(|a, b| a.key.name.cmp(&b.key.name));
    assert_eq!(
        keys[3..],
        [Queued::low(api), Queued::low(web)],
        "the relist: rs1 listed, rs2 gone"
    );
}

#[tokio::test(start_paused = true)]
async fn mapped_maps_through_the_function() {
    let mut cm = meta(ConfigMap::default(), "prod", "shared", "1");
    cm.data = Some([("pods".to_owned(), "a,c".to_owned())].into());
    let events: Vec<watcher::Result<Event<ConfigMap>>> = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(cm.clone())),
        Ok(Event::InitDone),
        Err(watcher::Error::NoResourceVersion),
        Ok(Event::Delete(cm)),
    ];
    let config_maps = Watch::from_events(futures::stream::iter(events));
    let source = config_maps.mapped(|cm: &ConfigMap| {
        let names = cm.data.as_ref().and_then(|d| d.get("pods")).cloned();
        names
            .unwrap_or_default()
            .split(',')
            .map(key)
            .collect::<Vec<_>>()
    });
    let mut source = source;
    let items: Vec<_> = bounded(Duration::from_secs(1), source().collect::<Vec<_>>()).await;
    assert_eq!(items.len(), 5);
    assert!(items[2].is_err());
    let keys: Vec<_> = items.into_iter().filter_map(Result::ok).collect();
    assert_eq!(
        keys,
        ["a", "c"]
            .map(low)
            .into_iter()
            .chain(["a", "c"].map(live))
            .collect::<Vec<_>>()
    );
}

/// The full wiring: one watch serves the keys, the resync and reconcile's reads. Every pod is
/// last reconciled at its last version; the pod missing from the relist is reconciled as
/// deleted; the watch error is counted in the summary.
#[tokio::test(start_paused = true)]
async fn a_controller_on_a_watch_reconciles_every_pod_to_its_last_version() {
    let recorded = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(pod("a", "1"))),
        Ok(Event::InitApply(pod("b", "2"))),
        Ok(Event::InitDone),
        Ok(Event::Apply(pod("a", "3"))),
        Err(watcher::Error::NoResourceVersion),
        Ok(Event::Init),
        Ok(Event::InitApply(pod("a", "5"))),
        Ok(Event::InitApply(pod("c", "6"))),
        Ok(Event::InitDone),
    ];
    // The recorded events arrive 100 ms apart, and the watch then stays open.
    let paced = futures::stream::iter(recorded)
        .then(|e| async {
            sleep(Duration::from_millis(100)).await;
            e
        })
        .chain(futures::stream::pending());
    let pods = Watch::from_events(paced);
    let last: Arc<Mutex<HashMap<String, Object<Pod>>>> = Arc::default();
    let resyncs = Arc::new(Mutex::new(0));
    let (reader, l, r) = (pods.clone(), last.clone(), resyncs.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new("pods", move |key: ObjectRef<Pod>, _ctx: Context| {
        let object = reader.get(&key);
        let mut last = l.lock().unwrap();
        if last.insert(key.name.clone(), object.clone()) == Some(object) {
            *r.lock().unwrap() += 1;
        }
        async { Ok::<_, Infallible>(Action::Done) }
    })
    .try_source(pods.keys())
    .try_source(pods.resync(Duration::from_secs(60)))
    .workers(2)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(90)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
    assert_eq!(summary.source_errors, 1);
    let last = last.lock().unwrap();
    assert_eq!(version(&last["a"]), Some("5"));
    assert!(
        matches!(last["b"], Object::Deleted(Some(_))),
        "{:?}",
        last["b"]
    );
    assert_eq!(version(&last["b"]), Some("2"));
    assert_eq!(version(&last["c"]), Some("6"));
    assert_eq!(
        *resyncs.lock().unwrap(),
        2,
        "the resync at 60 s: a and c, unchanged"
    );
}

fn deployment(name: &str, version: &str, generation: i64) -> Deployment {
    let mut d = meta(Deployment::default(), "prod", name, version);
    d.metadata.generation = Some(generation);
    d
}

/// A handle with a predicate yields a key only when the predicate's value changed for it:
/// status writes (same generation) yield none, a spec change does, a deletion always does; a
/// new subscription starts afresh. The store, `get` and a handle without a predicate see every
/// change.
#[tokio::test(start_paused = true)]
async fn a_predicate_lets_through_only_the_changes_it_watches() {
    use ctrlq_controller::kube::predicates;
    let (tx, mut rx) = mpsc::unbounded_channel::<watcher::Result<Event<Deployment>>>();
    let deployments: Watch<Deployment> =
        Watch::from_events(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let specs = deployments.with_predicate(predicates::generation);
    let mut spec_keys = (specs.keys())();
    let mut all_keys = (deployments.keys())();
    for e in [
        Event::Init,
        Event::InitApply(deployment("web", "1", 1)),
        Event::InitDone,
        Event::Apply(deployment("web", "2", 1)), // a status write
        Event::Apply(deployment("web", "3", 1)), // another
    ] {
        tx.send(Ok(e)).unwrap();
    }
    let web = || ObjectRef::<Deployment>::new("web").within("prod");
    assert_eq!(
        ok(ready(&mut spec_keys).await),
        [Queued::low(web())],
        "the list only"
    );
    assert_eq!(ready(&mut all_keys).await.len(), 3);
    assert_eq!(
        version(&specs.get(&web())),
        Some("3"),
        "get sees every change"
    );

    tx.send(Ok(Event::Apply(deployment("web", "4", 2))))
        .unwrap();
    assert_eq!(
        ok(ready(&mut spec_keys).await),
        [Queued::new(web(), NORMAL)],
        "a spec change"
    );
    // A relist of the same generation yields nothing; a deletion always yields its key.
    for e in [
        Event::Init,
        Event::InitApply(deployment("web", "4", 2)),
        Event::InitDone,
    ] {
        tx.send(Ok(e)).unwrap();
    }
    assert!(ready(&mut spec_keys).await.is_empty());
    tx.send(Ok(Event::Delete(deployment("web", "5", 2))))
        .unwrap();
    assert_eq!(
        ok(ready(&mut spec_keys).await),
        [Queued::new(web(), NORMAL)]
    );
    // Created again with generation 1: its last value was forgotten with the deletion.
    tx.send(Ok(Event::Apply(deployment("web", "6", 1))))
        .unwrap();
    assert_eq!(
        ok(ready(&mut spec_keys).await),
        [Queued::new(web(), NORMAL)]
    );
    // A new subscription yields the snapshot whatever the values.
    assert_eq!(ok(ready(&mut (specs.keys())()).await), [Queued::low(web())]);
    // A kind without a generation passes every change.
    let (pods, tx) = pods();
    let mut keys = (pods.with_predicate(predicates::generation).keys())();
    for e in [
        Event::Init,
        Event::InitDone,
        Event::Apply(pod("a", "1")),
        Event::Apply(pod("a", "2")),
    ] {
        tx.send(Ok(e)).unwrap();
    }
    assert_eq!(ok(ready(&mut keys).await), [live("a"), live("a")]);
}

/// Predicates apply to owners too: a child's status writes do not reconcile its owner, a label
/// change on it does.
#[tokio::test(start_paused = true)]
async fn a_predicate_applies_to_the_owners_source() {
    use ctrlq_controller::kube::predicates;
    let child = |version: &str, label: &str| {
        let mut rs = meta(ReplicaSet::default(), "prod", "web-1", version);
        rs.metadata.owner_references = Some(vec![owner("Deployment", "apps/v1", "web")]);
        rs.metadata.labels = Some([("tier".to_owned(), label.to_owned())].into());
        rs
    };
    let events: Vec<watcher::Result<Event<ReplicaSet>>> = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(child("1", "a"))),
        Ok(Event::InitDone),
        Ok(Event::Apply(child("2", "a"))),
        Ok(Event::Apply(child("3", "b"))),
    ];
    let replica_sets = Watch::from_events(futures::stream::iter(events));
    let labelled = replica_sets.with_predicate(predicates::labels);
    let keys: Vec<_> = bounded(
        Duration::from_secs(1),
        (labelled.owners::<Deployment>())().collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(keys.len(), 2, "the list and the label change: {keys:?}");
}

/// `Controller::for_watch` with `owns`: nothing is reconciled before every watch has listed
/// (the owned ReplicaSets list 10 s after the Deployments); then reconcile gets each key with
/// its object, and a child's change reconciles its owner.
#[tokio::test(start_paused = true)]
async fn a_controller_starts_after_every_watch_has_listed() {
    let deployments = Watch::from_events(
        futures::stream::iter([
            Ok::<_, watcher::Error>(Event::Init),
            Ok(Event::InitApply(deployment("web", "1", 1))),
            Ok(Event::InitDone),
        ])
        .chain(futures::stream::pending()),
    );
    let mut rs = meta(ReplicaSet::default(), "prod", "web-1", "2");
    rs.metadata.owner_references = Some(vec![owner("Deployment", "apps/v1", "web")]);
    let late = futures::stream::iter([
        Ok::<_, watcher::Error>(Event::Init),
        Ok(Event::InitApply(rs.clone())),
        Ok(Event::InitDone),
    ])
    .then(|e| async {
        sleep(Duration::from_secs(5)).await;
        e
    })
    .chain(futures::stream::pending());
    let replica_sets = Watch::from_events(late);
    let start = tokio::time::Instant::now();
    // Per reconcile: when, and the version it read.
    type Seen = Arc<Mutex<Vec<(Duration, Option<String>)>>>;
    let seen = Seen::default();
    let log = seen.clone();
    let shutdown = CancellationToken::new();
    let run = Controller::for_watch(
        "deployments",
        &deployments,
        move |key: ObjectRef<Deployment>, object: Object<Deployment>, _ctx| {
            assert_eq!(key.name, "web");
            let version = object
                .present()
                .and_then(|d| d.metadata.resource_version.clone());
            log.lock().unwrap().push((start.elapsed(), version));
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .owns(&replica_sets)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(20)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.not_synced, None);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|(at, _)| *at >= Duration::from_secs(15)),
        "a reconcile before the ReplicaSets listed: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, v)| v.as_deref() == Some("1")),
        "{seen:?}"
    );
}

/// A watch that never lists (every attempt fails): the run waits the sync timeout, then
/// returns without leading or reconciling, naming the watch and its last error.
#[tokio::test(start_paused = true)]
async fn a_watch_that_never_syncs_stops_the_run_with_a_typed_error() {
    let failing =
        futures::stream::repeat_with(|| Err::<Event<Pod>, _>(watcher::Error::NoResourceVersion))
            .then(|e| async {
                sleep(Duration::from_secs(1)).await;
                e
            });
    let pods = Watch::from_events(failing);
    // A second watch that never lists either: the watches wait under one bound, not one each.
    let config_maps =
        Watch::<ConfigMap>::from_events(futures::stream::pending::<watcher::Result<_>>());
    let start = tokio::time::Instant::now();
    let run = Controller::for_watch("pods", &pods, |_key, _pod, _ctx| async {
        Ok::<_, Infallible>(Action::Done)
    })
    .watches(&config_maps, |_cm| None)
    .sync_timeout(Duration::from_secs(30))
    .run(CancellationToken::new());
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    let not_synced = summary.not_synced.expect("not synced");
    assert_eq!(not_synced.name, "the watch of Pod");
    assert_eq!(not_synced.timeout, Duration::from_secs(30));
    assert!(not_synced.last_error.unwrap().contains("resourceVersion"));
    assert_eq!((summary.reconciles, summary.terms), (0, 0));
    assert!(pods.status().errors >= 29);

    // A shutdown while waiting ends the wait at once.
    let pods = Watch::<Pod>::from_events(futures::stream::pending::<watcher::Result<_>>());
    let shutdown = CancellationToken::new();
    let run = Controller::for_watch("pods", &pods, |_key, _pod, _ctx| async {
        Ok::<_, Infallible>(Action::Done)
    })
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(1), run).await.unwrap();
    assert_eq!(summary.not_synced, None);
}

/// One step of a scripted watch in the model test.
#[derive(Debug, Clone)]
enum Step {
    /// An object applied (created or changed).
    Apply(u8),
    /// An object deleted (as the watch saw it).
    Delete(u8),
    /// The watch restarted and listed these objects (at their current version, or at a new one
    /// for those it changes).
    Relist(Vec<(u8, bool)>),
    /// A watcher error.
    Error,
    /// A new subscription (a term's, a source resubscribed).
    Subscribe,
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    use proptest::prelude::*;
    let step = prop_oneof![
        4 => (0..6u8).prop_map(Step::Apply),
        2 => (0..6u8).prop_map(Step::Delete),
        1 => proptest::collection::vec((0..6u8, any::<bool>()), 0..6).prop_map(Step::Relist),
        1 => Just(Step::Error),
        1 => Just(Step::Subscribe),
    ];
    proptest::collection::vec(step, 1..40)
}

/// What the model says `get` answers for a key: present at a version, or deleted with the
/// version last held (or never seen).
#[derive(Debug, Clone, PartialEq)]
enum Held {
    Present(String),
    Deleted(Option<String>),
}

fn held(object: &Object<Pod>) -> Held {
    let version = |p: &Arc<Pod>| p.metadata.resource_version.clone().unwrap();
    match object {
        Object::Present(p) => Held::Present(version(p)),
        Object::Deleted(p) => Held::Deleted(p.as_ref().map(version)),
    }
}

/// The watch against a model of the store (kube's reflector semantics) and of deletions, over
/// random scripts of applies, deletes, relists (objects missing from them deleted meanwhile),
/// errors and subscriptions made at any point: at every step `get` answers what the model
/// holds; every key a subscription yields reads, when yielded, the state the model holds (the
/// store had the change first); and every change after a subscription (or in its snapshot) is
/// followed by a key of that subscription yielded at or after it.
#[test]
fn the_watch_follows_its_model_and_every_change_yields_a_key_after_it() {
    use std::collections::BTreeMap;
    let config = proptest::test_runner::Config {
        cases: 256,
        ..proptest::test_runner::Config::default()
    };
    proptest::proptest!(config, |(script in steps())| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let name = |k: u8| format!("o{k}");
            let (pods, tx) = pods();
            let mut version = 0u64;
            let mut next = || {
                version += 1;
                version.to_string()
            };
            // The model: the store, and the last state of each deleted key.
            let mut store: BTreeMap<u8, String> = BTreeMap::new();
            let mut gone: BTreeMap<u8, String> = BTreeMap::new();
            let model = |store: &BTreeMap<u8, String>, gone: &BTreeMap<u8, String>, k: u8| {
                match store.get(&k) {
                    Some(v) => Held::Present(v.clone()),
                    None => Held::Deleted(gone.get(&k).cloned()),
                }
            };
            // Per subscription: its stream, and per key the last step it changed since the
            // subscription and the last step the subscription yielded it.
            type Keys = BoxStream<'static, Result<Queued<ObjectRef<Pod>>, WatchError>>;
            type Steps = BTreeMap<u8, usize>;
            let mut subs: Vec<(Keys, Steps, Steps)> =
                vec![((pods.keys())(), BTreeMap::new(), BTreeMap::new())];
            // The first list.
            let initial = Step::Relist((0..3).map(|k| (k, true)).collect());
            for (at, step) in std::iter::once(initial).chain(script).enumerate() {
                let mut changed = Vec::new();
                match step {
                    Step::Apply(k) => {
                        let v = next();
                        tx.send(Ok(Event::Apply(pod(&name(k), &v)))).unwrap();
                        store.insert(k, v);
                        gone.remove(&k);
                        changed.push(k);
                    }
                    Step::Delete(k) => {
                        let v = next();
                        tx.send(Ok(Event::Delete(pod(&name(k), &v)))).unwrap();
                        store.remove(&k);
                        gone.insert(k, v);
                        changed.push(k);
                    }
                    Step::Relist(objects) => {
                        tx.send(Ok(Event::Init)).unwrap();
                        let mut listed = BTreeMap::new();
                        for (k, change) in objects {
                            let v = match store.get(&k) {
                                Some(v) if !change => v.clone(),
                                _ => next(),
                            };
                            listed.insert(k, v);
                        }
                        for (k, v) in &listed {
                            tx.send(Ok(Event::InitApply(pod(&name(*k), v)))).unwrap();
                        }
                        tx.send(Ok(Event::InitDone)).unwrap();
                        for (k, v) in std::mem::take(&mut store) {
                            if !listed.contains_key(&k) {
                                gone.insert(k, v);
                                changed.push(k);
                            }
                        }
                        for k in listed.keys() {
                            gone.remove(k);
                            changed.push(*k);
                        }
                        store = listed;
                    }
                    Step::Error => {
                        tx.send(Err(watcher::Error::NoResourceVersion)).unwrap();
                    }
                    Step::Subscribe => {
                        // Its snapshot: every present and remembered deleted key, now.
                        let keys = store.keys().chain(gone.keys()).map(|k| (*k, at)).collect();
                        subs.push(((pods.keys())(), keys, BTreeMap::new()));
                    }
                }
                for (_, since, _) in &mut subs {
                    for k in &changed {
                        since.insert(*k, at);
                    }
                }
                for (stream, _, yielded) in &mut subs {
                    for item in ready(stream).await {
                        let Ok(Queued { key, .. }) = item else { continue };
                        let k: u8 = key.name[1..].parse().unwrap();
                        // The store holds the change before its key comes.
                        assert_eq!(held(&pods.get(&key)), model(&store, &gone, k), "{key:?} at step {at}");
                        yielded.insert(k, at);
                    }
                }
                for k in 0..6 {
                    assert_eq!(held(&pods.get(&key(&name(k)))), model(&store, &gone, k), "step {at}");
                }
            }
            for (i, (_, since, yielded)) in subs.iter().enumerate() {
                for (k, at) in since {
                    assert!(
                        yielded.get(k).is_some_and(|y| y >= at),
                        "subscription {i}: key {k} changed at step {at}, last yielded {:?}",
                        yielded.get(k)
                    );
                }
            }
        });
    });
}
