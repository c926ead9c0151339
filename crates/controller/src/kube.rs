//! Key sources from kube-runtime (feature `kube`): a watcher of the primary resource, owned
//! resources mapped to their owner, related resources through a mapping function, and a
//! periodic resync, all as streams of [`ObjectRef`] keys for [`Controller::source`](crate::Controller::source).
//!
//! Each source takes a stream of [`watcher::Event`](Event)s, so it runs on a live
//! [`watcher`](::kube::runtime::watcher()) and on a recorded stream alike. Applied, listed and
//! deleted objects all yield a key (a reconcile finds a deleted object gone); `Init` and
//! `InitDone` yield none; watcher errors are logged and skipped, since the watcher retries by
//! itself (give it a backoff, for example `default_backoff()`).
//!
//! The controller subscribes a source once per run (a warm standby) or at the start of every term
//! (a cold one, see [`Controller::warm_standby`](crate::Controller::warm_standby)), and again
//! after it failed, so give it a closure that starts a new watcher: its initial list fills the
//! warm view, or the term's fresh queue. An [`ObjectRef`] key works
//! with a [`reflector`](::kube::runtime::reflector()) store, from which reconcile reads the object.
//!
//! # Examples
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use ctrlq_controller::{Action, Context, Controller};
//! use futures::StreamExt;
//! use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
//! use kube::runtime::reflector::{self, ObjectRef, Store};
//! use kube::runtime::{WatchStreamExt, watcher};
//! use kube::{Api, Client};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(client: Client) {
//! let deployments: Api<Deployment> = Api::all(client.clone());
//! let replica_sets: Api<ReplicaSet> = Api::all(client);
//!
//! // A store kept up to date for the whole run: reconcile reads objects from it.
//! let (store, writer) = reflector::store();
//! let watch = watcher(deployments.clone(), watcher::Config::default()).default_backoff();
//! tokio::spawn(reflector::reflector(writer, watch).for_each(|_| async {}));
//!
//! let reader = store.clone();
//! let reconcile = move |key: ObjectRef<Deployment>, _ctx: Context| {
//!     let object = reader.get(&key);
//!     async move {
//!         let _ = object; // None: deleted.
//!         Ok::<_, kube::Error>(Action::requeue_after(Duration::from_secs(300)))
//!     }
//! };
//! let (d, rs) = (deployments.clone(), replica_sets.clone());
//! let summary = Controller::new("deployments", reconcile)
//!     .source(move || {
//!         ctrlq_controller::kube::primary(watcher(d.clone(), watcher::Config::default()).default_backoff())
//!     })
//!     .source(move || {
//!         ctrlq_controller::kube::owned::<Deployment, _, _, _>(
//!             watcher(rs.clone(), watcher::Config::default()).default_backoff(),
//!         )
//!     })
//!     .source(move || ctrlq_controller::kube::resync(store.clone(), Duration::from_secs(600)))
//!     .workers(4)
//!     .run(CancellationToken::new())
//!     .await;
//! # let _ = summary;
//! # }
//! ```

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use ::kube::Resource;
use ::kube::runtime::reflector::{Lookup, ObjectRef, Store};
use ::kube::runtime::watcher::Event;
use futures::{Stream, StreamExt};
use tracing::debug;

/// The objects an event carries: applied, listed and deleted ones.
fn objects<K, E: fmt::Display>(event: Result<Event<K>, E>) -> Option<K> {
    match event {
        Ok(Event::Apply(o) | Event::InitApply(o) | Event::Delete(o)) => Some(o),
        Ok(Event::Init | Event::InitDone) => None,
        Err(e) => {
            debug!(error = %e, "watcher error; the watcher retries");
            None
        }
    }
}

/// The primary resource's keys: one per applied, listed or deleted object.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::kube::primary;
/// use futures::StreamExt;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::runtime::reflector::ObjectRef;
/// use kube::runtime::watcher::Event;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut pod = Pod::default();
/// pod.metadata.name = Some("web".into());
/// pod.metadata.namespace = Some("prod".into());
/// let events = futures::stream::iter([
///     Ok::<_, std::io::Error>(Event::Init),
///     Ok(Event::InitApply(pod)),
///     Ok(Event::InitDone),
/// ]);
/// let keys: Vec<_> = primary(events).collect().await;
/// assert_eq!(keys, [ObjectRef::<Pod>::new("web").within("prod")]);
/// # }
/// ```
pub fn primary<K, S, E>(events: S) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Lookup + Send + 'static,
    K::DynamicType: Default + Send,
    S: Stream<Item = Result<Event<K>, E>> + Send + 'static,
    E: fmt::Display,
{
    events.filter_map(|e| std::future::ready(objects(e).map(|o| ObjectRef::from_obj(&o))))
}

/// The keys of the owners of type `Owner` of each applied, listed or deleted child, through the
/// child's owner references (the child's namespace, the owner reference's name; references to
/// other kinds are skipped).
///
/// # Examples
///
/// ```
/// use ctrlq_controller::kube::owned;
/// use futures::StreamExt;
/// use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
/// use kube::runtime::reflector::ObjectRef;
/// use kube::runtime::watcher::Event;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut rs = ReplicaSet::default();
/// rs.metadata.name = Some("web-5d9c".into());
/// rs.metadata.namespace = Some("prod".into());
/// rs.metadata.owner_references = Some(vec![OwnerReference {
///     api_version: "apps/v1".into(),
///     kind: "Deployment".into(),
///     name: "web".into(),
///     uid: "1".into(),
///     ..OwnerReference::default()
/// }]);
/// let events = futures::stream::iter([Ok::<_, std::io::Error>(Event::Apply(rs))]);
/// let keys: Vec<ObjectRef<Deployment>> = owned(events).collect().await;
/// assert_eq!(keys, [ObjectRef::new("web").within("prod")]);
/// # }
/// ```
pub fn owned<Owner, Child, S, E>(events: S) -> impl Stream<Item = ObjectRef<Owner>> + Send + 'static
where
    Owner: Lookup + Send + 'static,
    Owner::DynamicType: Default + Send,
    Child: Resource + Send + 'static,
    S: Stream<Item = Result<Event<Child>, E>> + Send + 'static,
    E: fmt::Display,
{
    related(events, |child: &Child| {
        let ns = child.meta().namespace.as_deref();
        child
            .meta()
            .owner_references
            .iter()
            .flatten()
            .filter_map(|o| ObjectRef::from_owner_ref(ns, o, Owner::DynamicType::default()))
            .collect::<Vec<_>>()
    })
}

/// The keys `map` gives for each applied, listed or deleted related object (for example the
/// objects that reference a changed `ConfigMap`).
///
/// # Examples
///
/// ```
/// use ctrlq_controller::kube::related;
/// use futures::StreamExt;
/// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
/// use kube::runtime::reflector::ObjectRef;
/// use kube::runtime::watcher::Event;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("web-config".into());
/// let events = futures::stream::iter([Ok::<_, std::io::Error>(Event::Apply(cm))]);
/// // By convention here, `<name>-config` configures pod `<name>`.
/// let keys: Vec<ObjectRef<Pod>> = related(events, |cm: &ConfigMap| {
///     let name = cm.metadata.name.as_deref().unwrap_or_default();
///     name.strip_suffix("-config").map(ObjectRef::new)
/// })
/// .collect()
/// .await;
/// assert_eq!(keys, [ObjectRef::new("web")]);
/// # }
/// ```
pub fn related<K, R, S, E, F, I>(
    events: S,
    mut map: F,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Lookup + Send + 'static,
    K::DynamicType: Send,
    R: Send + 'static,
    S: Stream<Item = Result<Event<R>, E>> + Send + 'static,
    E: fmt::Display,
    F: FnMut(&R) -> I + Send + 'static,
    I: IntoIterator<Item = ObjectRef<K>>,
    I::IntoIter: Send + 'static,
{
    events
        .filter_map(|e| std::future::ready(objects(e)))
        .flat_map(move |o| futures::stream::iter(map(&o)))
}

/// Every object of `store` as a key, every `period` (the first time one period after the
/// subscription): controller-runtime's periodic resync, on the reflector store reconcile reads.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_controller::kube::resync;
/// use futures::StreamExt;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::runtime::reflector::{self, ObjectRef};
/// use kube::runtime::watcher::Event;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let (store, mut writer) = reflector::store::<Pod>();
/// let mut pod = Pod::default();
/// pod.metadata.name = Some("web".into());
/// writer.apply_watcher_event(&Event::Apply(pod));
/// let start = tokio::time::Instant::now();
/// let keys: Vec<_> = resync(store, Duration::from_secs(60)).take(2).collect().await;
/// assert_eq!(keys, [ObjectRef::<Pod>::new("web"), ObjectRef::new("web")]);
/// assert_eq!(start.elapsed(), Duration::from_secs(120));
/// # }
/// ```
pub fn resync<K>(
    store: Store<K>,
    period: Duration,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + Send + Sync,
{
    let start = tokio::time::Instant::now() + period;
    let ticks = tokio::time::interval_at(start, period.max(Duration::from_millis(1)));
    futures::stream::unfold(ticks, |mut ticks| async move {
        ticks.tick().await;
        Some(((), ticks))
    })
    .flat_map(move |()| {
        let keys: Vec<_> = store
            .state()
            .iter()
            .map(|o| ObjectRef::from_obj(&**o))
            .collect();
        debug!(keys = keys.len(), "resync");
        futures::stream::iter(keys)
    })
}
