//! CustomResourceDefinitions installed on a [`ControlPlane`], as envtest's `Environment.CRDs`.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use crate::rbac::FIELD_MANAGER;
use crate::{ADMIN, ControlPlane};

/// How long [`ControlPlane::install_crds`] waits for the CRDs to be served.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

impl ControlPlane {
    /// Installs `crds` as [`ADMIN`], and returns once each is `Established` and each of its
    /// served versions answers a list (at most 60 s in all).
    ///
    /// Take the definitions from kube-rs's `CustomResourceExt::crd()` of your
    /// `#[derive(CustomResource)]` types, or parse your YAML manifests into
    /// [`CustomResourceDefinition`] with your YAML crate. They are applied server-side, so
    /// installing one again (tests sharing a control plane, a changed schema) updates it.
    ///
    /// # Panics
    ///
    /// When the API server refuses one (an invalid schema), does not accept its names (a
    /// conflict), or does not serve it in time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    /// # struct Widget;
    /// # impl Widget { fn crd() -> apiextensions::CustomResourceDefinition { Default::default() } }
    /// use ctrlq_envtest::ControlPlane;
    /// // use kube::CustomResourceExt; // `crd()` of a `#[derive(CustomResource)]` type
    ///
    /// # async fn test() {
    /// let plane = ControlPlane::shared().await;
    /// plane.install_crds([Widget::crd()]).await;
    /// # }
    /// ```
    pub async fn install_crds(&self, crds: impl IntoIterator<Item = CustomResourceDefinition>) {
        let admin = self.client(ADMIN);
        let api = Api::<CustomResourceDefinition>::all(admin.clone());
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let crds: Vec<_> = crds.into_iter().collect();
        for crd in &crds {
            let name = crd
                .metadata
                .name
                .as_deref()
                .expect("a CRD has metadata.name");
            api.patch(name, &apply, &Patch::Apply(crd))
                .await
                .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        }
        let deadline = Instant::now() + CRD_TIMEOUT;
        for crd in &crds {
            let name = crd
                .metadata
                .name
                .as_deref()
                .expect("a CRD has metadata.name");
            wait_established(&api, name, deadline).await;
            let spec = &crd.spec;
            for version in spec.versions.iter().filter(|v| v.served) {
                let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
                let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
                wait_served(&admin, &resource, deadline).await;
            }
        }
    }
}

/// Reads the CRD `name` until its `Established` condition is true.
async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str, deadline: Instant) {
    loop {
        let crd = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name}: {e}"));
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        let condition = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
        if let Some(refused) = condition("NamesAccepted").filter(|c| c.status == "False") {
            panic!("CRD {name}: names not accepted: {:?}", refused.message);
        }
        if condition("Established").is_some_and(|c| c.status == "True") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "CRD {name} not Established within {CRD_TIMEOUT:?} (conditions: {conditions:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lists `resource` until the API server answers.
async fn wait_served(admin: &kube::Client, resource: &ApiResource, deadline: Instant) {
    let api = Api::<DynamicObject>::all_with(admin.clone(), resource);
    loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => return,
            Err(e) => assert!(
                Instant::now() < deadline,
                "{} {} not served within {CRD_TIMEOUT:?}: {e}",
                resource.api_version,
                resource.plural
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
