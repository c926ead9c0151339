//! The operator example on the real kube-apiserver, written on ctrlq and on kube-runtime: the
//! same scenario against each (a generator created, changed, its ConfigMap deleted behind it,
//! the generator deleted), and the LIST and WATCH requests each made, from the API server's
//! own `apiserver_request_total`.

use std::future::Future;
use std::time::Duration;

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use examples::operator::{ConfigMapGenerator, FINALIZER, GeneratorSpec, ctrlq, kube_runtime};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use prometheus_client::registry::Registry;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

/// Polls `check` every 50 ms until it holds, at most 30 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    timeout(Duration::from_secs(30), async {
        while !check().await {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within 30 s"));
}

/// Installs the generator's CRD (served once `install_crds` returns) and waits for the
/// `default` namespace.
async fn install_crd(plane: &ControlPlane, admin: &Client) {
    plane.install_crds([ConfigMapGenerator::crd()]).await;
    // The `default` namespace (the ctrlq operator's Lease) is created by the API server shortly
    // after it is ready.
    let namespaces = Api::<Namespace>::all(admin.clone());
    eventually("the default namespace", || async {
        namespaces.get_opt("default").await.ok().flatten().is_some()
    })
    .await;
}

/// The content of ConfigMap `ns/name`, if it exists.
async fn content(admin: &Client, ns: &str, name: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    cm.data?.get("content").cloned()
}

/// The scenario, in namespace `ns`, with an operator running.
async fn scenario(admin: &Client, ns: &str) {
    create_namespace(admin, ns).await;
    let generators = Api::<ConfigMapGenerator>::namespaced(admin.clone(), ns);
    let g = ConfigMapGenerator::new(
        "g",
        GeneratorSpec {
            content: "a".into(),
        },
    );
    generators.create(&PostParams::default(), &g).await.unwrap();
    eventually("the ConfigMap written", || async {
        content(admin, ns, "g").await.as_deref() == Some("a")
    })
    .await;
    eventually("the status at generation 1", || async {
        let g = generators.get("g").await.unwrap();
        g.status.and_then(|s| s.observed_generation) == Some(1)
    })
    .await;
    let g = generators.get("g").await.unwrap();
    assert_eq!(g.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));

    // A spec change.
    let patch = serde_json::json!({ "spec": { "content": "b" } });
    generators
        .patch("g", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the ConfigMap changed", || async {
        content(admin, ns, "g").await.as_deref() == Some("b")
    })
    .await;
    // The ConfigMap deleted behind the operator: written again.
    let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), ns);
    config_maps
        .delete("g", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the ConfigMap written again", || async {
        config_maps
            .get_opt("g")
            .await
            .unwrap()
            .is_some_and(|cm| cm.metadata.deletion_timestamp.is_none())
    })
    .await;
    // The generator deleted: its ConfigMap goes first (no garbage collector runs here), then it.
    generators
        .delete("g", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the generator gone", || async {
        generators.get_opt("g").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        content(admin, ns, "g").await,
        None,
        "cleaned up by the finalizer"
    );
}

/// LIST and WATCH requests for the operator's two resources so far.
async fn requests(plane: &ControlPlane) -> [f64; 2] {
    let mut counts = [0.0; 2];
    for (i, verb) in ["LIST", "WATCH"].into_iter().enumerate() {
        for resource in ["configmapgenerators", "configmaps"] {
            let labels = [
                format!("resource=\"{resource}\""),
                format!("verb=\"{verb}\""),
            ];
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            counts[i] += plane.metric("apiserver_request_total", &labels).await;
        }
    }
    counts
}

/// Both operators through the same scenario, one after the other on one control plane of the
/// test's own (so that the request counts are theirs alone): each does the job, and the ctrlq
/// operator, with its Lease and metrics, makes no more LISTs and WATCHes than kube-runtime's.
#[tokio::test]
async fn both_operators_do_the_job_and_ctrlq_lists_and_watches_no_more() {
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    install_crd(&plane, &admin).await;

    let before = requests(&plane).await;
    let shutdown = CancellationToken::new();
    let client = admin.clone();
    let stop = shutdown.clone();
    let ours = tokio::spawn(async move {
        let mut registry = Registry::default();
        let summary = ctrlq::run(client, "replica-a", &mut registry, stop).await;
        let mut text = String::new();
        ctrlq_controller::prometheus::encode(&mut text, &registry).unwrap();
        (summary, text)
    });
    scenario(&admin, "on-ctrlq").await;
    shutdown.cancel();
    let (summary, metrics) = timeout(Duration::from_secs(60), ours)
        .await
        .unwrap()
        .unwrap();
    let ctrlq_requests = requests(&plane).await;
    let ctrlq_requests = [ctrlq_requests[0] - before[0], ctrlq_requests[1] - before[1]];
    assert_eq!(summary.not_synced, None);
    assert!(summary.successes >= 3, "{summary:?}");
    assert_eq!(summary.drain, ctrlq_controller::Drain::Finished);
    for series in [
        r#"controller_runtime_reconcile_total{controller="configmap-generator",result="success"}"#,
        r#"leader_election_master_status{name="leader"}"#,
        r#"workqueue_adds_total{controller="configmap-generator",name="configmap-generator"}"#,
    ] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }

    let before = requests(&plane).await;
    let shutdown = CancellationToken::new();
    let theirs = tokio::spawn(kube_runtime::run(admin.clone(), shutdown.clone()));
    scenario(&admin, "on-kube-runtime").await;
    shutdown.cancel();
    timeout(Duration::from_secs(60), theirs)
        .await
        .unwrap()
        .unwrap();
    let after = requests(&plane).await;
    let kube_requests = [after[0] - before[0], after[1] - before[1]];
    println!("LIST, WATCH requests: ctrlq {ctrlq_requests:?}, kube-runtime {kube_requests:?}");
    assert!(
        ctrlq_requests[0] <= kube_requests[0],
        "LISTs: {ctrlq_requests:?} against {kube_requests:?}"
    );
    assert!(
        ctrlq_requests[1] <= kube_requests[1],
        "WATCHes: {ctrlq_requests:?} against {kube_requests:?}"
    );
}

/// Non-blank lines that are not comments.
fn code_lines(source: &str) -> usize {
    source
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// The operator on ctrlq, with its Lease, its metrics, its drain and its generation
/// predicate, takes no more lines than the same operator on kube-runtime without them (both as
/// rustfmt writes them; the resource and what a reconcile writes are shared).
#[test]
fn the_ctrlq_operator_takes_no_more_lines_than_kube_runtimes() {
    let ours = code_lines(include_str!("../src/operator/ctrlq.rs"));
    let theirs = code_lines(include_str!("../src/operator/kube_runtime.rs"));
    println!("code lines: ctrlq {ours}, kube-runtime {theirs}");
    assert!(
        ours <= theirs,
        "ctrlq {ours} lines against kube-runtime's {theirs}"
    );
}
