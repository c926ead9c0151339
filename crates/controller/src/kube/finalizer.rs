//! [`finalizer`]: cleanup that runs before an object is gone, as kube-runtime's finalizer
//! helper, returning the runner's [`Action`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use ::kube::Resource;
use ::kube::api::{Api, Patch, PatchParams};
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;

use super::Watched;
use crate::Action;

/// What [`finalizer`] asks of its reconcile: act on the object, or clean up after it before
/// the API server lets it go.
#[derive(Debug, Clone, PartialEq)]
pub enum FinalizerEvent<K> {
    /// The object is live and carries the finalizer: reconcile it.
    Apply(Arc<K>),
    /// The object is being deleted and still carries the finalizer: release what it holds
    /// outside the cluster. Once this returns `Ok`, the finalizer is removed and the API server
    /// deletes the object.
    Cleanup(Arc<K>),
}

/// What went wrong in [`finalizer`].
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E: fmt::Debug + fmt::Display> {
    /// The reconcile of a live object failed.
    #[error("reconcile failed: {0}")]
    Apply(E),
    /// The cleanup failed; the finalizer stays, so the cleanup is tried again.
    #[error("cleanup failed: {0}")]
    Cleanup(E),
    /// Adding or removing the finalizer failed (a conflict with a newer version included:
    /// the object's next event reconciles it again).
    #[error("patching the finalizers failed: {0}")]
    Patch(#[source] ::kube::Error),
    /// The object has no name.
    #[error("the object has no name")]
    Unnamed,
}

/// Runs `reconcile` under the finalizer `name`, as kube-runtime's `finalizer` does: a live
/// object without the finalizer gets it first (a merge patch guarded by its
/// `resourceVersion`; the patch's own event reconciles it again, so this returns
/// [`Action::Done`]); a live object with it is reconciled
/// ([`FinalizerEvent::Apply`]); an object being deleted that carries it is cleaned up
/// ([`FinalizerEvent::Cleanup`]), and after a successful cleanup the finalizer is removed, so
/// the API server deletes it; an object being deleted without it needs nothing.
///
/// Call it with the object [`Watch::get`](super::Watch::get) holds when it is
/// [present](super::Object::Present): an object that is gone carried no finalizer any more.
///
/// # Errors
///
/// [`FinalizerError`]: the reconcile's or the cleanup's error, or the patch's.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use ctrlq_controller::kube::{FinalizerEvent, Object, Watch, finalizer};
/// use ctrlq_controller::{Action, Controller};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::watcher::Config;
/// use kube::{Api, Client};
///
/// # fn f(client: Client) {
/// let api = Api::<ConfigMap>::default_namespaced(client);
/// let config_maps = Watch::new(api.clone(), Config::default());
/// let controller = Controller::for_watch("exporter", &config_maps, move |_key, object, _ctx| {
///     let api = api.clone();
///     async move {
///         let Object::Present(cm) = object else { return Ok(Action::Done) };
///         finalizer(&api, "example.com/export", cm, |event| async move {
///             match event {
///                 FinalizerEvent::Apply(_cm) => { /* export it */ }
///                 FinalizerEvent::Cleanup(_cm) => { /* delete the export */ }
///             }
///             Ok::<_, std::io::Error>(Action::requeue_after(Duration::from_secs(300)))
///         })
///         .await
///     }
/// });
/// # let _ = controller;
/// # }
/// ```
pub async fn finalizer<K, F, Fut, E>(
    api: &Api<K>,
    name: &str,
    object: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Watched + Serialize + DeserializeOwned,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: fmt::Debug + fmt::Display,
{
    let meta = object.meta();
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let held = finalizers.iter().any(|f| f == name);
    let object_name = meta.name.clone().ok_or(FinalizerError::Unnamed)?;
    let version = meta.resource_version.clone();
    match (meta.deletion_timestamp.is_some(), held) {
        (false, true) => reconcile(FinalizerEvent::Apply(object))
            .await
            .map_err(FinalizerError::Apply),
        (false, false) => {
            let mut with = finalizers;
            with.push(name.to_owned());
            set_finalizers(api, &object_name, with, version).await?;
            Ok(Action::Done)
        }
        (true, true) => {
            let action = reconcile(FinalizerEvent::Cleanup(object))
                .await
                .map_err(FinalizerError::Cleanup)?;
            let without = finalizers.into_iter().filter(|f| f != name).collect();
            set_finalizers(api, &object_name, without, version).await?;
            Ok(action)
        }
        (true, false) => Ok(Action::Done),
    }
}

/// Writes `finalizers` with a merge patch that fails (409) if the object changed since
/// `version`.
async fn set_finalizers<K, E>(
    api: &Api<K>,
    name: &str,
    finalizers: Vec<String>,
    version: Option<String>,
) -> Result<(), FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
    E: fmt::Debug + fmt::Display,
{
    let patch = k8s_openapi::serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": version }
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
        .map_err(FinalizerError::Patch)
}
