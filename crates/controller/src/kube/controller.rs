//! The kube-aware faces of [`Controller`]: a controller of the objects of a [`Watch`], the
//! objects they own and the objects related to them, each source waited for until its watch
//! has listed.

use std::future::Future;

use ::kube::runtime::reflector::ObjectRef;
use futures::FutureExt;

use super::{Object, Watch, Watched};
use crate::{Action, Context, Controller};

impl<R: Watched, E: Send + 'static> Controller<ObjectRef<R>, E> {
    /// A controller named `name` of the objects of `watch`: their keys are its source, and
    /// `reconcile` gets each key with the object as the watch holds it when the reconcile
    /// starts (present, or deleted with its last known state: [`Watch::get`]) and the
    /// [`Context`]. The run waits for the watch's initial list before it reconciles anything
    /// ([`sync_timeout`](Controller::sync_timeout)). Give it a handle with a predicate
    /// ([`Watch::with_predicate`]) to reconcile only the changes it watches.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ctrlq_controller::kube::{Object, Watch, predicates};
    /// use ctrlq_controller::{Action, Controller};
    /// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    /// use kube::runtime::watcher::Config;
    /// use kube::{Api, Client};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # async fn run(client: Client) {
    /// let deployments = Watch::new(Api::<Deployment>::all(client.clone()), Config::default());
    /// let replica_sets = Watch::new(Api::<ReplicaSet>::all(client), Config::default());
    /// let summary = Controller::for_watch(
    ///     "deployments",
    ///     &deployments.with_predicate(predicates::generation),
    ///     |_key, object: Object<Deployment>, _ctx| async move {
    ///         if let Object::Present(deployment) = object {
    ///             let _ = deployment; // act on it
    ///         }
    ///         Ok::<_, kube::Error>(Action::requeue_after(Duration::from_secs(300)))
    ///     },
    /// )
    /// .owns(&replica_sets)
    /// .workers(4)
    /// .run(CancellationToken::new())
    /// .await;
    /// assert!(summary.not_synced.is_none());
    /// # }
    /// ```
    pub fn for_watch<F, Fut>(name: impl Into<String>, watch: &Watch<R>, reconcile: F) -> Self
    where
        F: Fn(ObjectRef<R>, Object<R>, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let reader = watch.clone();
        Controller::new(name, move |key: ObjectRef<R>, ctx| {
            let object = reader.get(&key);
            reconcile(key, object, ctx)
        })
        .try_source(watch.keys())
        .synced_with(watch)
    }

    /// Adds the owners of kind `R` of `children`'s objects as a source ([`Watch::owners`]),
    /// waited for until `children` has listed: a child created, changed or deleted reconciles
    /// its owner.
    ///
    /// # Examples
    ///
    /// See [`for_watch`](Self::for_watch).
    #[must_use]
    pub fn owns<C: Watched>(self, children: &Watch<C>) -> Self {
        self.try_source(children.owners::<R>())
            .synced_with(children)
    }

    /// Adds the keys `map` gives for each of `related`'s objects as a source
    /// ([`Watch::mapped`]), waited for until `related` has listed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_controller::kube::{Object, Watch};
    /// use ctrlq_controller::{Action, Controller};
    /// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    /// use kube::runtime::reflector::ObjectRef;
    /// use kube::runtime::watcher::Config;
    /// use kube::{Api, Client};
    ///
    /// # fn f(client: Client) {
    /// let pods = Watch::new(Api::<Pod>::default_namespaced(client.clone()), Config::default());
    /// let config_maps = Watch::new(Api::<ConfigMap>::default_namespaced(client), Config::default());
    /// let controller = Controller::for_watch("pods", &pods, |_key, _pod: Object<Pod>, _ctx| async {
    ///     Ok::<_, kube::Error>(Action::Done)
    /// })
    /// // By convention here, `<name>-config` configures pod `<name>`.
    /// .watches(&config_maps, |cm: &ConfigMap| {
    ///     let name = cm.metadata.name.as_deref().unwrap_or_default();
    ///     let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
    ///     name.strip_suffix("-config").map(|pod| ObjectRef::new(pod).within(ns))
    /// });
    /// # let _ = controller;
    /// # }
    /// ```
    #[must_use]
    pub fn watches<T, F, I>(self, related: &Watch<T>, map: F) -> Self
    where
        T: Watched,
        F: Fn(&T) -> I + Send + Sync + 'static,
        I: IntoIterator<Item = ObjectRef<R>>,
        I::IntoIter: Send + 'static,
    {
        self.try_source(related.mapped(map)).synced_with(related)
    }

    /// Waits, at the start of the run, until `watch` has listed.
    fn synced_with<T: Watched>(mut self, watch: &Watch<T>) -> Self {
        let watch = watch.clone();
        self.syncs.push(Box::new(move |timeout| {
            async move { watch.synced(timeout).await }.boxed()
        }));
        self
    }
}
