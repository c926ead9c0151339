//! The same operator on kube-runtime's `Controller`: no leader election and no metrics (it has
//! neither), a graceful shutdown on `shutdown`. Its status writes each trigger one more
//! reconcile: filtering the primary resource by generation takes `Controller::for_stream`,
//! which kube-runtime keeps behind its unstable `unstable-runtime-stream-control` feature.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{Error, Event, finalizer};
use kube::runtime::watcher::Config;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{ConfigMapGenerator, FINALIZER, MANAGED, apply, cleanup};

/// Runs the operator until `shutdown`.
pub async fn run(client: Client, shutdown: CancellationToken) {
    Controller::new(
        Api::<ConfigMapGenerator>::all(client.clone()),
        Config::default(),
    )
    .owns(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels(MANAGED),
    )
    .with_config(ControllerConfig::default().concurrency(4))
    .graceful_shutdown_on(shutdown.cancelled_owned())
    .run(reconcile, error_policy, Arc::new(client))
    .for_each(|_| async {})
    .await;
}

async fn reconcile(
    g: Arc<ConfigMapGenerator>,
    client: Arc<Client>,
) -> Result<Action, Error<kube::Error>> {
    let api = Api::<ConfigMapGenerator>::namespaced(
        (*client).clone(),
        &g.namespace().unwrap_or_default(),
    );
    finalizer(&api, FINALIZER, g, |event| async move {
        match event {
            Event::Apply(g) => apply(&client, &g, "configmap-generator").await?,
            Event::Cleanup(g) => cleanup(&client, &g).await?,
        }
        Ok(Action::requeue(Duration::from_secs(300)))
    })
    .await
}

fn error_policy(_: Arc<ConfigMapGenerator>, _: &Error<kube::Error>, _: Arc<Client>) -> Action {
    Action::requeue(Duration::from_secs(5))
}
