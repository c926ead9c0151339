//! The same small operator written twice, on ctrlq ([`ctrlq`]) and on kube-runtime's
//! `Controller` ([`kube_runtime`]), so that what each takes can be read and counted side by
//! side: a `ConfigMapGenerator` custom resource owns a ConfigMap holding its `content`,
//! written with server-side apply; its status records the generation it was applied at; a
//! finalizer deletes the ConfigMap before the resource goes; a ConfigMap deleted or changed by
//! someone else is written again; status writes do not trigger another reconcile. The parts
//! both share (the resource, what a reconcile writes) are here.

pub mod ctrlq;
pub mod kube_runtime;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer both operators hold on every generator.
pub const FINALIZER: &str = "ctrlq.example/configmap";

/// The label on every ConfigMap a generator owns, which the operators' watch of ConfigMaps
/// selects.
pub const MANAGED: &str = "ctrlq.example/generator";

/// What a generator asks for: a ConfigMap of its name holding `content`.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ctrlq.example",
    version = "v1",
    kind = "ConfigMapGenerator",
    namespaced,
    status = "GeneratorStatus"
)]
pub struct GeneratorSpec {
    /// The content of the ConfigMap's `content` key.
    pub content: String,
}

/// What the operator last did for a generator.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorStatus {
    /// The generation the ConfigMap was last written for.
    pub observed_generation: Option<i64>,
}

/// Writes the generator's ConfigMap and then its status, both with server-side apply under
/// `manager`.
///
/// # Errors
///
/// The API server's.
pub async fn apply(client: &Client, g: &ConfigMapGenerator, manager: &str) -> kube::Result<()> {
    let (ns, name) = (g.namespace().unwrap_or_default(), g.name_any());
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([(MANAGED.to_owned(), name.clone())].into()),
            owner_references: g.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some([("content".to_owned(), g.spec.content.clone())].into()),
        ..ConfigMap::default()
    };
    let params = PatchParams::apply(manager).force();
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    config_maps
        .patch(&name, &params, &Patch::Apply(&cm))
        .await?;
    let status = serde_json::json!({
        "apiVersion": ConfigMapGenerator::api_version(&()),
        "kind": ConfigMapGenerator::kind(&()),
        "status": GeneratorStatus { observed_generation: g.metadata.generation },
    });
    let generators = Api::<ConfigMapGenerator>::namespaced(client.clone(), &ns);
    generators
        .patch_status(&name, &params, &Patch::Apply(&status))
        .await?;
    Ok(())
}

/// Deletes the generator's ConfigMap (gone already is fine).
///
/// # Errors
///
/// The API server's, but for a 404.
pub async fn cleanup(client: &Client, g: &ConfigMapGenerator) -> kube::Result<()> {
    let config_maps =
        Api::<ConfigMap>::namespaced(client.clone(), &g.namespace().unwrap_or_default());
    match config_maps
        .delete(&g.name_any(), &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(drop),
    }
}
