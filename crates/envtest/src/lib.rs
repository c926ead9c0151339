//! A real Kubernetes control plane for your controller's tests: etcd and kube-apiserver on
//! 127.0.0.1, started by the test and stopped after it, as Go's controller-runtime `envtest`
//! starts one.
//!
//! A [`ControlPlane`] serves HTTPS with a self-signed certificate, authorizes with RBAC, and
//! knows an administrator ([`ADMIN`]) and four identities with no rights of their own
//! ([`USERS`]), which a test grants what it means to allow ([`grant`], [`grant_leases`]). It
//! installs your CustomResourceDefinitions ([`ControlPlane::install_crds`]), writes a kubeconfig
//! for `kubectl` ([`ControlPlane::kubeconfig_file`]), hands out kube-rs clients
//! ([`ControlPlane::client`]), and puts faults on the API server: frozen, killed, started again.
//! Tests of one binary share one ([`ControlPlane::shared`]), each in a namespace of its own
//! ([`create_namespace`]), or start their own ([`ControlPlane::start`]).
//!
//! # What it needs
//!
//! - The binaries `etcd` and `kube-apiserver`, found by [`find_binaries`]: where
//!   `$KUBEBUILDER_ASSETS` points (what `setup-envtest` installs, as for Go's envtest), else in
//!   `$CTRLQ_CONTROLPLANE_BIN`, else in the cache ctrlq's `scripts/install-controlplane` builds
//!   them into with Go. A missing binary fails the start loudly, naming all three.
//! - A Unix system with `sh` and `kill` (the watchdog and the faults use them); nothing else:
//!   the service-account key is generated in process (ECDSA P-256, with `ring`), and the API
//!   server makes its own serving certificate.
//! - In your dev-dependencies, `k8s-openapi` with the Kubernetes version feature of your choice
//!   (this crate, a library, picks none, as kube-rs asks) and `tokio` with a runtime.
//!
//! The control plane's waits are in real time (the server's clock cannot be paused), each
//! bounded: the start by [`START_TIMEOUT`], a grant by 30 s, the CRDs by 60 s.
//!
//! # Examples
//!
//! A CRD installed, then an object of it created and listed (in a test, `#[tokio::test]`
//! replaces `main`):
//!
//! ```
//! use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
//! use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let plane = ControlPlane::start().await; // stopped and removed when dropped
//! // With kube-rs's derive: `plane.install_crds([Widget::crd()]).await`.
//! let crd = serde_json::from_value(json!({
//!     "apiVersion": "apiextensions.k8s.io/v1",
//!     "kind": "CustomResourceDefinition",
//!     "metadata": { "name": "widgets.example.com" },
//!     "spec": {
//!         "group": "example.com",
//!         "names": { "kind": "Widget", "plural": "widgets" },
//!         "scope": "Namespaced",
//!         "versions": [{
//!             "name": "v1", "served": true, "storage": true,
//!             "schema": { "openAPIV3Schema": {
//!                 "type": "object", "x-kubernetes-preserve-unknown-fields": true
//!             } },
//!         }],
//!     },
//! }))
//! .unwrap();
//! plane.install_crds([crd]).await;
//!
//! let admin = plane.client(ADMIN);
//! create_namespace(&admin, "demo").await;
//! let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
//! let widgets = ApiResource::from_gvk_with_plural(&gvk, "widgets");
//! let api = Api::<DynamicObject>::namespaced_with(admin, "demo", &widgets);
//! let widget = DynamicObject::new("first", &widgets).data(json!({ "spec": { "size": 3 } }));
//! api.create(&PostParams::default(), &widget).await.unwrap();
//! assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 1);
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod binaries;
mod control_plane;
mod crd;
mod error;
mod faults;
mod keys;
mod kubeconfig;
mod process;
mod rbac;

pub use binaries::{CONTROL_PLANE_VERSION, find_binaries};
pub use control_plane::{ADMIN, ControlPlane, START_TIMEOUT, USERS};
pub use error::Error;
pub use rbac::{create_namespace, grant, grant_leases};
