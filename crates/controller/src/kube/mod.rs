//! Key sources from kube-runtime (feature `kube`): one [`Watch`] per watched resource feeds
//! both the reflector store that reconcile reads and the keys the controller queues.
//!
//! A key is yielded only after the store holds the event that triggered it, so a reconcile
//! started from it reads that version or a later one, never an older one: there is no second
//! watch whose store could lag. The watch starts at the first subscription and outlives the
//! controller's re-subscriptions (a cold standby's terms, a source resubscribed after a
//! failure), which tap the running watch instead of listing again. From one `Watch`:
//!
//! - [`Watch::keys`]: the keys of its objects (the controller's primary resource);
//! - [`Watch::owners`]: the keys of their owners of a kind (the objects a controller owns);
//! - [`Watch::mapped`]: any keys a function gives for each object (related objects);
//! - [`Watch::resync`]: every key in the store, periodically;
//! - [`Watch::get`]: the object behind a key, [present](Object::Present) or
//!   [deleted](Object::Deleted) with the state the store last held;
//! - [`Watch::with_predicate`]: a handle whose sources yield a key only when a part of the
//!   object changed ([`predicates`]: the generation, so that status writes trigger nothing; the
//!   labels; the annotations; the finalizers; or a function of your own).
//!
//! [`Controller::for_watch`](crate::Controller::for_watch), [`owns`](crate::Controller::owns)
//! and [`watches`](crate::Controller::watches) put them together: the primary resource's keys
//! with reconcile given each object, the owned and related objects' keys, and a start that
//! waits until every watch has listed. [`finalizer`] runs cleanup before an object is gone, and
//! [`shutdown_on_signal`] turns SIGTERM into the controller's drain.
//!
//! Applied, listed and deleted objects all yield a key, and so does an object missing from a
//! relist (deleted while the watch was down: client-go's `DeletedFinalStateUnknown`). Each
//! watcher error is yielded as an `Err` item by every source of the watch, so
//! [`Controller::try_source`](crate::Controller::try_source) reports it
//! ([`Event::SourceError`](crate::Event::SourceError), the summary's `source_errors`), and
//! [`Watch::status`] and [`Watch::check`] show a watch that keeps failing.
//!
//! # Examples
//!
//! A Deployment controller that also reconciles a Deployment when one of its ReplicaSets
//! changes, and every ten minutes:
//!
//! ```no_run
//! use std::time::Duration;
//! use ctrlq_controller::kube::{Object, Watch};
//! use ctrlq_controller::{Action, Context, Controller};
//! use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
//! use kube::runtime::reflector::ObjectRef;
//! use kube::runtime::watcher;
//! use kube::{Api, Client};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(client: Client) {
//! let deployments = Watch::new(Api::<Deployment>::all(client.clone()), watcher::Config::default());
//! let replica_sets = Watch::new(Api::<ReplicaSet>::all(client), watcher::Config::default());
//!
//! let reader = deployments.clone();
//! let reconcile = move |key: ObjectRef<Deployment>, _ctx: Context| {
//!     let object = reader.get(&key);
//!     async move {
//!         match object {
//!             Object::Present(deployment) => { let _ = deployment; /* act on it */ }
//!             Object::Deleted(last) => { let _ = last; /* clean up after it */ }
//!         }
//!         Ok::<_, kube::Error>(Action::requeue_after(Duration::from_secs(300)))
//!     }
//! };
//! let summary = Controller::new("deployments", reconcile)
//!     .try_source(deployments.keys())
//!     .try_source(replica_sets.owners::<Deployment>())
//!     .try_source(deployments.resync(Duration::from_secs(600)))
//!     .workers(4)
//!     .run(CancellationToken::new())
//!     .await;
//! # let _ = summary;
//! # }
//! ```

mod controller;
mod finalizer;
pub mod predicates;
mod shard;
mod signal;
mod watch;

pub use finalizer::{FinalizerError, FinalizerEvent, finalizer};
pub use shard::shard_client;
pub use signal::shutdown_on_signal;
pub use watch::{
    DEFAULT_DELETED_RETENTION, Object, Watch, WatchError, WatchStatus, WatchUnhealthy, Watched,
};
