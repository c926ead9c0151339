//! The operator on ctrlq: leader-elected on a Lease, with controller-runtime's metrics, a drain
//! on shutdown, and status writes filtered by generation.

use std::time::Duration;

use ctrlq_controller::kube::{FinalizerEvent, Watch, finalizer, predicates};
use ctrlq_controller::prometheus::Metrics;
use ctrlq_controller::{Action, Controller, Summary};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher::Config;
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::{ConfigMapGenerator as Generator, FINALIZER, MANAGED, apply, cleanup};

/// Runs the operator as `id` until `stop` (for a process:
/// `ctrlq_controller::kube::shutdown_on_signal()`), its metrics in `reg`.
///
/// # Panics
///
/// Never with the election settings it uses.
pub async fn run(client: Client, id: &str, reg: &mut Registry, stop: CancellationToken) -> Summary {
    let lock = LeaseLock::new(client.clone(), "default", "configmap-generator", id);
    let election = LeaderElectionConfig::default().release_on_cancel(true);
    let elector = LeaderElector::new(lock, election).expect("valid settings");
    let generators = Watch::new(Api::<Generator>::all(client.clone()), Config::default());
    let config_maps = Watch::new(
        Api::<ConfigMap>::all(client.clone()),
        Config::default().labels(MANAGED),
    );
    let specs = generators.with_predicate(predicates::generation);
    Controller::for_watch("configmap-generator", &specs, move |_key, object, _ctx| {
        let client = client.clone();
        async move {
            let client = &client;
            finalizer(client, FINALIZER, object, |event| async move {
                match event {
                    FinalizerEvent::Apply(g) => apply(client, &g, "configmap-generator").await?,
                    FinalizerEvent::Cleanup(g) => cleanup(client, &g).await?,
                }
                Ok::<_, kube::Error>(Action::requeue_after(Duration::from_secs(300)))
            })
            .await
        }
    })
    .owns(&config_maps)
    .workers(4)
    .leader_elector(elector)
    .prometheus(&Metrics::register(reg))
    .run(stop)
    .await
}
