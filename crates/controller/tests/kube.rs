//! kube-runtime sources against recorded watch event streams, relists included.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::kube::{owned, primary, related, resync};
use ctrlq_controller::{Action, Context, Controller, Drain};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, Event};
use support::bounded;
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

/// A watch of pods: a list, changes, an error, a delete, then a relist (the watch restarted).
fn recorded_pods() -> Vec<watcher::Result<Event<Pod>>> {
    vec![
        Ok(Event::Init),
        Ok(Event::InitApply(pod("a", "1"))),
        Ok(Event::InitApply(pod("b", "2"))),
        Ok(Event::InitDone),
        Ok(Event::Apply(pod("a", "3"))),
        Err(watcher::Error::NoResourceVersion),
        Ok(Event::Delete(pod("b", "4"))),
        Ok(Event::Init),
        Ok(Event::InitApply(pod("a", "5"))),
        Ok(Event::InitApply(pod("c", "6"))),
        Ok(Event::InitDone),
    ]
}

fn key(name: &str) -> ObjectRef<Pod> {
    ObjectRef::new(name).within("prod")
}

#[tokio::test]
async fn primary_yields_a_key_per_listed_applied_or_deleted_object() {
    let keys: Vec<_> = primary(futures::stream::iter(recorded_pods()))
        .collect()
        .await;
    assert_eq!(keys, ["a", "b", "a", "b", "a", "c"].map(key));
}

#[tokio::test]
async fn owned_maps_children_to_their_owners_of_that_kind() {
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
        Ok(Event::Init),
        Ok(Event::InitApply(rs1)),
        Ok(Event::InitDone),
    ];
    let keys: Vec<ObjectRef<Deployment>> = owned(futures::stream::iter(events)).collect().await;
    let web = ObjectRef::new("web").within("prod");
    let api = ObjectRef::new("api").within("dev");
    assert_eq!(keys, [web.clone(), api, web.clone(), web]);
}

#[tokio::test]
async fn related_maps_through_the_function() {
    let mut cm = meta(ConfigMap::default(), "prod", "shared", "1");
    cm.data = Some([("pods".to_owned(), "a,c".to_owned())].into());
    let events: Vec<watcher::Result<Event<ConfigMap>>> = vec![
        Ok(Event::Init),
        Ok(Event::InitApply(cm.clone())),
        Ok(Event::InitDone),
        Err(watcher::Error::NoResourceVersion),
        Ok(Event::Delete(cm)),
    ];
    let keys: Vec<_> = related(futures::stream::iter(events), |cm: &ConfigMap| {
        let names = cm
            .data
            .as_ref()
            .and_then(|d| d.get("pods"))
            .cloned()
            .unwrap_or_default();
        names.split(',').map(key).collect::<Vec<_>>()
    })
    .collect()
    .await;
    assert_eq!(keys, ["a", "c", "a", "c"].map(key));
}

/// The full wiring: the recorded watch goes through a reflector into the controller, reconcile
/// reads the object from the store; after the relist every pod was last reconciled at its last
/// version and the deleted one was seen gone. A resync brings every stored pod back.
#[tokio::test(start_paused = true)]
async fn a_controller_on_a_reflector_reconciles_every_pod_to_its_last_version() {
    let (store, writer) = reflector::store::<Pod>();
    // The recorded events arrive 100 ms apart.
    let paced = futures::stream::iter(recorded_pods()).then(|e| async {
        sleep(Duration::from_millis(100)).await;
        e
    });
    let events = reflector::reflector(writer, paced);
    let once = Arc::new(Mutex::new(Some(events.boxed())));
    let last: Arc<Mutex<HashMap<String, Option<String>>>> = Arc::default();
    let resyncs = Arc::new(Mutex::new(0));
    let (reader, l, r) = (store.clone(), last.clone(), resyncs.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new("pods", move |key: ObjectRef<Pod>, _ctx: Context| {
        let version = reader
            .get(&key)
            .and_then(|p| p.metadata.resource_version.clone());
        let mut last = l.lock().unwrap();
        if last.insert(key.name.clone(), version.clone()) == Some(version) {
            *r.lock().unwrap() += 1;
        }
        async { Ok::<_, Infallible>(Action::Done) }
    })
    .source(move || primary(once.lock().unwrap().take().expect("one term")))
    .source({
        let store = store.clone();
        move || resync(store.clone(), Duration::from_secs(60))
    })
    .workers(2)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(90)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
    let last = last.lock().unwrap();
    assert_eq!(last["a"].as_deref(), Some("5"));
    assert_eq!(last["b"], None, "deleted, and absent from the relist");
    assert_eq!(last["c"].as_deref(), Some("6"));
    assert_eq!(
        *resyncs.lock().unwrap(),
        2,
        "the resync at 60 s: a and c, unchanged"
    );
}
