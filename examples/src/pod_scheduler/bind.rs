//! The writes of a cycle: the bind through `pods/binding`, and the `PodScheduled` condition of
//! a pod no node has room for.

use std::sync::Arc;
use std::time::Duration;

use ctrlq_queue_async::scheduling::Popped;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::Semaphore;

use super::resources::PodInfo;
use super::scheduler::{Bound, Term, lock};

/// The field manager of the scheduler's writes.
const MANAGER: &str = "ctrlq-pod-scheduler";

impl Term {
    /// Binds `pod` to `node` (where the cycle assumed it), unless the term's grant no longer
    /// holds. On success the pod's flight ends; on failure the assumption is forgotten and the
    /// pod goes back with no rejector: an error, which waits out its backoff.
    pub(super) async fn bind(
        self,
        mut pod: Popped<String, PodInfo>,
        node: String,
        queued_for: Duration,
        permits: Arc<Semaphore>,
    ) {
        let Ok(_permit) = permits.acquire_owned().await else {
            return;
        };
        let info = pod.data().clone();
        let result = if self.leadership.is_current() {
            let binding = binding(&info, &node);
            let pods = Api::<Pod>::namespaced(self.client.clone(), &info.namespace);
            let params = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            let sent = pods.create_subresource::<_, serde_json::Value>(
                "binding", &info.name, &params, &binding,
            );
            sent.await.map(drop).map_err(|e| e.to_string())
        } else {
            Err("the term's grant no longer holds".to_owned())
        };
        match result {
            Ok(()) => {
                let bound = Bound {
                    pod: pod.key().clone(),
                    node,
                    attempts: pod.attempts(),
                    queued_for,
                    fencing_token: self.leadership.fencing_token(),
                };
                drop(pod.done());
                tracing::debug!(pod = bound.pod, node = bound.node, "bound");
                self.report.with(|r| r.bound.push(bound));
            }
            Err(error) => {
                tracing::debug!(pod = pod.key(), node, %error, "bind failed");
                self.report.with(|r| r.bind_errors += 1);
                let mut view = lock(&self.view);
                view.cache.forget(pod.key());
                pod.set_rejectors([]);
                self.hand_back(&view, pod);
            }
        }
    }

    /// Sets the pod's `PodScheduled` condition to `False`, reason `Unschedulable`, with
    /// `message`, as kube-scheduler writes it; only while the term's grant holds.
    pub(super) async fn mark_unschedulable(self, info: PodInfo, message: String) {
        if !self.leadership.is_current() {
            return;
        }
        let condition = serde_json::json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": Time(Timestamp::now()),
        });
        let patch = serde_json::json!({ "status": { "conditions": [condition] } });
        let pods = Api::<Pod>::namespaced(self.client.clone(), &info.namespace);
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        let written = pods
            .patch_status(&info.name, &params, &Patch::Strategic(&patch))
            .await;
        if let Err(error) = written {
            tracing::debug!(pod = info.key(), %error, "writing PodScheduled failed");
            self.report.with(|r| r.status_errors += 1);
        }
    }
}

/// The binding of `pod` to `node`, naming the pod's uid so it cannot bind a pod recreated
/// under the same name.
fn binding(pod: &PodInfo, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: pod.uid.clone(),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        },
    }
}
