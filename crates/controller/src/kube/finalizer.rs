//! [`finalizer`]: cleanup that runs before an object is gone, as kube-runtime's finalizer
//! helper, returning the runner's [`Action`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use ::kube::api::{Patch, PatchParams};
use ::kube::core::Request;
use ::kube::{Client, Resource};
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;

use super::{Object, Watched};
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
    /// The patch request could not be built (an invalid name).
    #[error("the patch request could not be built: {0}")]
    Request(#[source] ::kube::core::request::Error),
}

/// Runs `reconcile` under the finalizer `name`, as kube-runtime's `finalizer` does: a live
/// object without the finalizer gets it first (a merge patch guarded by its
/// `resourceVersion`) and is then reconciled as the patch returned it, at once (kube-runtime
/// waits for the patch's event instead, which a predicate on the generation filters out); a
/// live object with it is reconciled ([`FinalizerEvent::Apply`]); an object being deleted that carries it is cleaned up
/// ([`FinalizerEvent::Cleanup`]), and after a successful cleanup the finalizer is removed, so
/// the API server deletes it; an object being deleted without it needs nothing.
///
/// Give it the object as [`Watch::get`](super::Watch::get) holds it: one that is
/// [deleted](Object::Deleted) from the store carried no finalizer any more, and needs nothing
/// ([`Action::Done`]). The patches go through `client` to the object's own namespace.
///
/// # Errors
///
/// [`FinalizerError`]: the reconcile's or the cleanup's error, or the patch's.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use ctrlq_controller::kube::{FinalizerEvent, Watch, finalizer};
/// use ctrlq_controller::{Action, Controller};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::runtime::watcher::Config;
/// use kube::{Api, Client};
///
/// # fn f(client: Client) {
/// let config_maps = Watch::new(Api::<ConfigMap>::default_namespaced(client.clone()), Config::default());
/// let controller = Controller::for_watch("exporter", &config_maps, move |_key, object, _ctx| {
///     let client = client.clone();
///     async move {
///         finalizer(&client, "example.com/export", object, |event| async move {
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
    client: &Client,
    name: &str,
    object: Object<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Watched + Serialize + DeserializeOwned,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: fmt::Debug + fmt::Display,
{
    let Object::Present(object) = object else {
        return Ok(Action::Done);
    };
    let meta = object.meta();
    let api = Request::new(K::url_path(&(), meta.namespace.as_deref()));
    let api = (client, &api);
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let held = finalizers.iter().any(|f| f == name);
    let object_name = meta.name.clone().ok_or(FinalizerError::Unnamed)?;
    let version = meta.resource_version.clone();
    match (meta.deletion_timestamp.is_some(), held) {
        (false, true) => reconcile(FinalizerEvent::Apply(object))
            .await
            .map_err(FinalizerError::Apply),
        (false, false) => {
            // Reconciled at once with the finalizer on: the patch's own event may never come
            // back as a key (a predicate on the generation filters it).
            let mut with = finalizers;
            with.push(name.to_owned());
            let object = set_finalizers(api, &object_name, with, version).await?;
            reconcile(FinalizerEvent::Apply(Arc::new(object)))
                .await
                .map_err(FinalizerError::Apply)
        }
        (true, true) => {
            let action = reconcile(FinalizerEvent::Cleanup(object))
                .await
                .map_err(FinalizerError::Cleanup)?;
            let without = finalizers.into_iter().filter(|f| f != name).collect();
            set_finalizers::<K, E>(api, &object_name, without, version).await?;
            Ok(action)
        }
        (true, false) => Ok(Action::Done),
    }
}

/// Writes `finalizers` with a merge patch that fails (409) if the object changed since
/// `version`, and returns the object as written.
async fn set_finalizers<K, E>(
    (client, api): (&Client, &Request),
    name: &str,
    finalizers: Vec<String>,
    version: Option<String>,
) -> Result<K, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
    E: fmt::Debug + fmt::Display,
{
    let patch = k8s_openapi::serde_json::json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": version }
    });
    let request = api.patch(name, &PatchParams::default(), &Patch::Merge(patch));
    let request = request.map_err(FinalizerError::Request)?;
    client
        .request::<K>(request)
        .await
        .map_err(FinalizerError::Patch)
}
