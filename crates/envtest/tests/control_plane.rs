//! The control plane starter against the real binaries: what a user's test relies on. The
//! faults (pause, kill, restart, etcd past the API server) are exercised by the leader's and the
//! controller's tests against the API server.

use std::time::Duration;

use ctrlq_envtest::{ADMIN, ControlPlane, USERS, create_namespace, grant};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

/// The Gadget CRD whose spec has the fields `properties` (an integer each); the API server
/// prunes any other.
fn gadget_crd(properties: &[&str]) -> CustomResourceDefinition {
    let properties: serde_json::Map<_, _> = properties
        .iter()
        .map(|p| ((*p).to_owned(), json!({ "type": "integer" })))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "gadgets.example.com" },
        "spec": {
            "group": "example.com",
            "names": { "kind": "Gadget", "plural": "gadgets" },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": {
                        "type": "object",
                        "properties": properties,
                    } },
                } },
            }],
        },
    }))
    .unwrap()
}

/// A CRD is served once installed; installing it again with a changed schema updates it; a
/// user granted rights on it alone reads it, and nothing else.
#[tokio::test]
async fn an_installed_crd_should_be_served_to_whom_it_is_granted() {
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, "crd").await;
    plane.install_crds([gadget_crd(&["size"])]).await;
    plane.install_crds([gadget_crd(&["size", "weight"])]).await;
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let gadgets = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let api = Api::<DynamicObject>::namespaced_with(admin, "crd", &gadgets);
    let gadget = DynamicObject::new("g", &gadgets)
        .data(json!({ "spec": { "size": 3, "weight": 4, "colour": 5 } }));
    api.create(&PostParams::default(), &gadget).await.unwrap();

    grant(
        &plane.client(ADMIN),
        "crd",
        "bob",
        "example.com",
        "gadgets",
        &["list"],
    )
    .await;
    let bob = plane.client("bob");
    let listed = Api::<DynamicObject>::namespaced_with(bob.clone(), "crd", &gadgets)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let spec = &listed.items[0].data["spec"];
    assert_eq!(
        spec,
        &json!({ "size": 3, "weight": 4 }),
        "the second schema's fields, the rest pruned"
    );
    let refused = Api::<ConfigMap>::namespaced(bob, "crd")
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused}"
    );
}

/// The kubeconfig names every identity as a context, and each reaches the server as itself.
#[tokio::test]
async fn the_kubeconfig_should_reach_the_server_as_each_identity() {
    let plane = ControlPlane::shared().await;
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig_file()).unwrap();
    assert_eq!(kubeconfig.current_context.as_deref(), Some(ADMIN));
    for user in std::iter::once(ADMIN).chain(USERS) {
        let options = kube::config::KubeConfigOptions {
            context: Some(user.into()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &options)
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let request = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .header("content-type", "application/json")
            .body(
                serde_json::to_vec(&json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"
                }))
                .unwrap(),
            )
            .unwrap();
        let review: serde_json::Value = client.request(request).await.unwrap();
        assert_eq!(review["status"]["userInfo"]["username"], user);
    }
}

/// A control plane of a test's own is stopped and its directory removed when dropped, also when
/// the test panics.
#[tokio::test]
async fn a_control_plane_should_stop_and_clean_up_when_dropped() {
    let started = tokio::spawn(async {
        let plane = ControlPlane::start().await;
        let seen = (plane.dir().to_owned(), plane.url().to_owned());
        let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
        assert_eq!(
            plane.client(ADMIN).request_text(request).await.unwrap(),
            "ok"
        );
        std::panic::panic_any(seen);
    });
    let payload = started.await.unwrap_err().into_panic();
    let (dir, url) = *payload.downcast::<(std::path::PathBuf, String)>().unwrap();
    assert!(!dir.exists(), "{} left behind", dir.display());
    let port = url.rsplit_once(':').unwrap().1;
    let connect = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"));
    let connected = tokio::time::timeout(Duration::from_secs(5), connect).await;
    assert!(
        !matches!(connected, Ok(Ok(_))),
        "kube-apiserver still listens at {url}"
    );
}
