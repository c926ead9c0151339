//! A controller on a real kube-runtime watch: kube-apiserver and etcd started by the leader
//! crate's `support/control_plane.rs` (binaries from `scripts/install-controlplane`), a
//! reflector over a watcher of ConfigMaps feeding `primary`, reconcile reading the store. Real
//! time: every wait is bounded.

#[path = "../../leader/tests/support/control_plane.rs"]
mod control_plane;
mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control_plane::{ADMIN, ControlPlane, create_namespace};
use ctrlq_controller::kube::primary;
use ctrlq_controller::{Action, Context, Controller, Drain};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use support::bounded;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

/// The version each ConfigMap was last reconciled at (`None`: gone from the store).
type Seen = Arc<Mutex<HashMap<String, Option<String>>>>;

/// Waits (at most 60 s) until `name` was last reconciled at `version`.
async fn reconciled(seen: &Seen, name: &str, version: Option<&str>) {
    timeout(Duration::from_secs(60), async {
        loop {
            if seen.lock().unwrap().get(name).map(Option::as_deref) == Some(version) {
                return;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{name} reconciled at {version:?} within 60 s: {:?}",
            seen.lock().unwrap()
        )
    });
}

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
    let seen = Seen::default();
    let (reader, s) = (store.clone(), seen.clone());
    let shutdown = CancellationToken::new();
    let run = Controller::new(
        "configmaps",
        move |key: ObjectRef<ConfigMap>, _ctx: Context| {
            let version = reader
                .get(&key)
                .and_then(|cm| cm.metadata.resource_version.clone());
            s.lock().unwrap().insert(key.name.clone(), version);
            async { Ok::<_, Infallible>(Action::Done) }
        },
    )
    .source(move || primary(once.lock().unwrap().take().expect("one term")))
    .workers(2)
    .run(shutdown.clone());
    let run = tokio::spawn(run);

    // Listed at the start.
    reconciled(&seen, "a", a.metadata.resource_version.as_deref()).await;
    // Created, then changed, during the watch.
    let b = api.create(&pp, &config_map("b", "1")).await.unwrap();
    reconciled(&seen, "b", b.metadata.resource_version.as_deref()).await;
    let mut changed = a.clone();
    changed.data = Some([("value".to_owned(), "2".to_owned())].into());
    let a2 = api.replace("a", &pp, &changed).await.unwrap();
    assert_ne!(a2.metadata.resource_version, a.metadata.resource_version);
    reconciled(&seen, "a", a2.metadata.resource_version.as_deref()).await;
    // Deleted: reconciled once more, gone from the store.
    api.delete("b", &Default::default()).await.unwrap();
    reconciled(&seen, "b", None).await;

    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.drain, Drain::Finished);
}
