//! The pod scheduler example (`examples::pod_scheduler`) on the real kube-apiserver: Nodes are
//! plain API objects with an allocatable (no kubelet runs), Pods name the scheduler, and the
//! scheduler binds them through `pods/binding`. Each test has a namespace, a scheduler name and
//! a node pool (a label the scheduler selects) of its own, so the tests share one control plane;
//! the failover test counts the API server's binds and has a control plane of its own.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use ctrlq_leader::LeaderElectionConfig;
use ctrlq_queue_async::scheduling::{SchedulingQueueConfig, SubQueue};
use examples::pod_scheduler::{PodQueue, Report, Resources, Scheduler, SchedulerConfig};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

/// Polls `check` every 50 ms until it holds, at most `secs` seconds; panics naming `what`.
async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    timeout(Duration::from_secs(secs), async {
        while !check().await {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} within {secs} s"));
}

/// A namespace whose pods the API server admits (the service-account admission wants the
/// `default` ServiceAccount, which no controller manager creates here).
async fn namespace(admin: &Client, ns: &str) {
    create_namespace(admin, ns).await;
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "default" } })).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
}

/// Creates node `name` in `pool` with `cpu` millicores and `memory` bytes allocatable.
async fn node(admin: &Client, pool: &str, name: String, cpu: i64, memory: i64) {
    let nodes = Api::<Node>::all(admin.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "pool": pool } },
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_allocatable(admin, &name, cpu, memory).await;
}

/// Sets node `name`'s allocatable (and capacity) through its status.
async fn set_allocatable(admin: &Client, name: &str, cpu: i64, memory: i64) {
    let list = json!({ "cpu": format!("{cpu}m"), "memory": memory.to_string() });
    let status = json!({ "status": { "capacity": list, "allocatable": list } });
    Api::<Node>::all(admin.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A pod for `scheduler` requesting `cpu` millicores and `memory` bytes, gated by `gates`.
fn pod(name: &str, scheduler: &str, cpu: i64, memory: i64, gates: &[&str]) -> Pod {
    let gates: Vec<_> = gates.iter().map(|g| json!({ "name": g })).collect();
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "schedulerName": scheduler,
            "schedulingGates": gates,
            "containers": [{
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": format!("{cpu}m"), "memory": memory.to_string() } },
            }],
        },
    }))
    .unwrap()
}

/// Creates `pods` in `ns`, 32 at a time.
async fn create_pods(admin: &Client, ns: &str, pods: Vec<Pod>) {
    let api = Api::<Pod>::namespaced(admin.clone(), ns);
    let created: Vec<_> = stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for result in created {
        result.unwrap();
    }
}

/// Pod name to node name, for the pods of `ns` that are bound.
async fn placements(admin: &Client, ns: &str) -> HashMap<String, String> {
    let pods = Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let bound = pods.items.into_iter().filter_map(|p| {
        let node = p.spec.as_ref()?.node_name.clone()?;
        Some((p.name_any(), node))
    });
    bound.collect()
}

/// A process killed (and reaped) when dropped, also when the test panics.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scheduler replica running in a task of its own.
struct Replica {
    scheduler: Arc<Scheduler>,
    stop: CancellationToken,
    task: JoinHandle<u64>,
}

impl Replica {
    fn start(client: &Client, config: SchedulerConfig) -> Self {
        let scheduler = Arc::new(Scheduler::new(client.clone(), config).unwrap());
        let stop = CancellationToken::new();
        let (s, t) = (scheduler.clone(), stop.clone());
        let task = tokio::spawn(async move { s.run(t).await });
        Replica {
            scheduler,
            stop,
            task,
        }
    }

    /// The current term's queue, once the replica leads.
    async fn queue(&self) -> PodQueue {
        let scheduler = &self.scheduler;
        eventually(30, "a term's queue", || async {
            scheduler.queue().is_some()
        })
        .await;
        scheduler.queue().unwrap()
    }

    fn report(&self) -> Report {
        self.scheduler.report()
    }

    async fn stop(self) -> Report {
        self.stop.cancel();
        timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the replica stops within 30 s")
            .unwrap();
        self.scheduler.report()
    }
}

/// A scheduler named `name` for the nodes of pool `name`, on a Lease in `ns`.
fn config(name: &str, ns: &str, id: &str) -> SchedulerConfig {
    SchedulerConfig::new(name, id)
        .lease(ns, name)
        .nodes(format!("pool={name}"))
}

/// The `PodScheduled` condition of pod `ns/name`: status, reason, message.
async fn pod_scheduled(admin: &Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let pod = Api::<Pod>::namespaced(admin.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let conditions = pod.status?.conditions?;
    let c = conditions.into_iter().find(|c| c.type_ == "PodScheduled")?;
    Some((
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

/// Every pod of `ns` bound, each node within its allocatable by the API server's own view.
async fn assert_within_allocatable(admin: &Client, ns: &str, pool: &str, pods: usize) {
    let nodes = Api::<Node>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("pool={pool}")))
        .await
        .unwrap();
    let mut room: BTreeMap<String, Resources> = BTreeMap::new();
    for n in &nodes.items {
        room.insert(n.name_any(), Resources::allocatable(n).unwrap());
    }
    let list = Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), pods);
    for p in &list.items {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let node = node.unwrap_or_else(|| panic!("{} is not bound", p.name_any()));
        let info = examples::pod_scheduler::PodInfo::from_pod(p).unwrap();
        let left = room
            .get_mut(&node)
            .unwrap_or_else(|| panic!("{node} is not in the pool"));
        *left = *left - info.requests;
    }
    for (node, left) in room {
        assert!(
            left.cpu_millis >= 0 && left.memory_bytes >= 0,
            "{node} is over its allocatable by {left}"
        );
    }
}

/// 1,000 pods on 100 nodes with room for exactly ten each: every pod bound, by one bind
/// each, and no node over its allocatable, by the API server's own objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_fill_a_hundred_nodes_and_none_overflows() {
    let (ns, name) = ("sched-thousand", "sched-thousand");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    let replica = Replica::start(&admin, config(name, ns, "a"));
    let nodes = (0..100).map(|i| node(&admin, name, format!("{name}-{i:03}"), 4_000, 5 * GI));
    stream::iter(nodes)
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let pods = (0..1_000)
        .map(|i| pod(&format!("p-{i:04}"), name, 400, 512 * MI, &[]))
        .collect();
    create_pods(&admin, ns, pods).await;

    eventually(120, "1,000 pods bound", || async {
        placements(&admin, ns).await.len() == 1_000
    })
    .await;
    assert_within_allocatable(&admin, ns, name, 1_000).await;
    let report = replica.stop().await;
    let bound: HashSet<_> = report.bound.iter().map(|b| b.pod.clone()).collect();
    assert_eq!(
        (report.bound.len(), bound.len()),
        (1_000, 1_000),
        "one bind per pod"
    );
    assert_eq!(report.bind_errors, 0);
}

/// Pods no node has room for wait as unschedulable, their `PodScheduled` condition saying
/// what lacked; a node added with room for some of them brings exactly those back, and a
/// node's allocatable raised brings the last one: each bound at its second attempt, popped
/// after waiting less than the unschedulable timeout (an hour here), so by the hint, not the
/// timeout's flush. A bound pod deleted makes room for another waiting one the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_waiting_for_room_are_bound_when_an_event_makes_it() {
    let (ns, name) = ("sched-room", "sched-room");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    let hour = Duration::from_secs(3_600);
    let queue_config = SchedulingQueueConfig::default().max_in_unschedulable(hour);
    // In the first list, so the first attempts see its allocatable.
    node(&admin, name, format!("{name}-small"), 1_000, GI).await;
    let replica = Replica::start(&admin, config(name, ns, "a").queue(queue_config));
    let queue = replica.queue().await;

    let mut pods: Vec<Pod> = (0..5)
        .map(|i| pod(&format!("cpu-{i}"), name, 2_000, GI / 2, &[]))
        .collect();
    pods.push(pod("memory", name, 500, 8 * GI, &[]));
    create_pods(&admin, ns, pods).await;
    let waiting = ["cpu-0", "cpu-1", "cpu-2", "cpu-3", "cpu-4", "memory"];
    let key = |p: &str| format!("{ns}/{p}");
    eventually(30, "six pods unschedulable", || async {
        waiting
            .iter()
            .all(|p| queue.where_is(&key(p)) == Some(SubQueue::Unschedulable))
    })
    .await;
    let why_cpu = (
        "False".into(),
        "Unschedulable".into(),
        "0/1 nodes are available: 1 Insufficient cpu.".into(),
    );
    let why_memory = (
        "False".into(),
        "Unschedulable".into(),
        "0/1 nodes are available: 1 Insufficient memory.".into(),
    );
    eventually(30, "PodScheduled written", || async {
        pod_scheduled(&admin, ns, "cpu-0").await == Some(why_cpu.clone())
            && pod_scheduled(&admin, ns, "memory").await == Some(why_memory.clone())
    })
    .await;
    assert_eq!(replica.report().moved_by_events, 0);

    // Room for the five CPU pods (10 cores, 4 GiB), not for the 8 GiB one.
    node(&admin, name, format!("{name}-large"), 10_000, 4 * GI).await;
    eventually(30, "the five CPU pods bound", || async {
        let placed = placements(&admin, ns).await;
        (0..5).all(|i| placed.get(&format!("cpu-{i}")) == Some(&format!("{name}-large")))
    })
    .await;
    let report = replica.report();
    assert_eq!(
        report.moved_by_events, 5,
        "the hint moved the five CPU pods only"
    );
    for b in &report.bound {
        assert_eq!(b.attempts, 2, "{b:?}");
        assert!(b.queued_for < hour, "{b:?}");
    }
    assert_eq!(
        queue.where_is(&key("memory")),
        Some(SubQueue::Unschedulable)
    );
    assert_eq!(report.unschedulable, 6, "nothing was tried again in vain");

    // The small node's memory raised: the 8 GiB pod fits there now.
    set_allocatable(&admin, &format!("{name}-small"), 1_000, 16 * GI).await;
    eventually(30, "the memory pod bound", || async {
        placements(&admin, ns).await.get("memory") == Some(&format!("{name}-small"))
    })
    .await;

    // The small node is full (cpu 500m of 1000m); a 600m pod waits until "memory" goes.
    create_pods(&admin, ns, vec![pod("after", name, 600, MI, &[])]).await;
    eventually(30, "after unschedulable", || async {
        queue.where_is(&key("after")) == Some(SubQueue::Unschedulable)
    })
    .await;
    let zero = DeleteParams::default().grace_period(0);
    Api::<Pod>::namespaced(admin.clone(), ns)
        .delete("memory", &zero)
        .await
        .unwrap();
    eventually(30, "after bound", || async {
        placements(&admin, ns).await.contains_key("after")
    })
    .await;

    let report = replica.stop().await;
    assert_eq!(report.moved_by_events, 7);
    assert_eq!(report.unschedulable, 7);
    for b in &report.bound {
        assert_eq!(b.attempts, 2, "{b:?}");
        assert!(b.queued_for < hour, "{b:?}");
    }
}

/// A pod with a scheduling gate waits behind the queue's gate, never popped, while a pod
/// created after it is bound; with its gate removed, it is bound at its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_is_not_popped_until_its_gate_is_removed() {
    let (ns, name) = ("sched-gated", "sched-gated");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    let replica = Replica::start(&admin, config(name, ns, "a"));
    node(&admin, name, format!("{name}-0"), 4_000, 4 * GI).await;
    let queue = replica.queue().await;

    create_pods(
        &admin,
        ns,
        vec![pod("gated", name, 100, MI, &["example.com/wait"])],
    )
    .await;
    create_pods(&admin, ns, vec![pod("free", name, 100, MI, &[])]).await;
    eventually(30, "free bound", || async {
        placements(&admin, ns).await.contains_key("free")
    })
    .await;
    let gated = format!("{ns}/gated");
    assert_eq!(queue.where_is(&gated), Some(SubQueue::Unschedulable));
    assert!(!placements(&admin, ns).await.contains_key("gated"));

    let ungate = json!({ "spec": { "schedulingGates": null } });
    Api::<Pod>::namespaced(admin.clone(), ns)
        .patch("gated", &PatchParams::default(), &Patch::Merge(&ungate))
        .await
        .unwrap();
    eventually(30, "gated bound", || async {
        placements(&admin, ns).await.contains_key("gated")
    })
    .await;
    let report = replica.stop().await;
    let bound = report.bound.iter().find(|b| b.pod == gated).unwrap();
    assert_eq!(bound.attempts, 1, "never popped while gated");
    assert_eq!(report.unschedulable, 0);
}

/// A pod waiting out its backoff (moved there by a node that fits it, with a minute of
/// backoff and no pop from backoff) is deleted: it leaves every sub-queue and is not in
/// flight, and nothing is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_in_backoff_is_gone_from_every_sub_queue() {
    let (ns, name) = ("sched-backoff", "sched-backoff");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    let minute = Duration::from_secs(60);
    let queue_config = SchedulingQueueConfig::default()
        .initial_backoff(minute)
        .max_backoff(minute)
        .pop_from_backoff(false);
    let replica = Replica::start(&admin, config(name, ns, "a").queue(queue_config));
    let queue = replica.queue().await;
    create_pods(&admin, ns, vec![pod("p", name, 100, MI, &[])]).await;
    let key = format!("{ns}/p");
    eventually(30, "p unschedulable (no node)", || async {
        queue.where_is(&key) == Some(SubQueue::Unschedulable)
    })
    .await;
    node(&admin, name, format!("{name}-0"), 1_000, GI).await;
    eventually(30, "p in backoff", || async {
        queue.where_is(&key) == Some(SubQueue::Backoff)
    })
    .await;

    Api::<Pod>::namespaced(admin.clone(), ns)
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "p gone from the queue", || async {
        queue.where_is(&key).is_none()
    })
    .await;
    assert!(!queue.is_in_flight(&key));
    assert!(queue.is_empty(), "{}", queue.pending());
    let report = replica.stop().await;
    assert!(report.bound.is_empty());
    assert_eq!(report.moved_by_events, 1);
}

/// Two replicas on one Lease: the leader is killed (its task aborted, its Lease left to
/// expire) while 400 pods are being bound; the standby takes over from a fresh list. Every pod
/// ends up bound, each by exactly one bind the API server accepted (its own count of binds),
/// no pod in both replicas' reports, no node over its allocatable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_leaves_no_pod_bound_twice_and_none_stranded() {
    let (ns, name) = ("sched-failover", "sched-failover");
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    let election = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1_200))
        .retry_period(Duration::from_millis(300));
    let a = Replica::start(
        &admin,
        config(name, ns, "a")
            .election(election.clone())
            .parallel_binds(4),
    );
    a.queue().await; // a leads
    let b = Replica::start(&admin, config(name, ns, "b").election(election));
    let nodes = (0..40).map(|i| node(&admin, name, format!("{name}-{i:02}"), 1_000, GI));
    stream::iter(nodes)
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let pods = (0..400)
        .map(|i| pod(&format!("p-{i:03}"), name, 100, 100 * MI, &[]))
        .collect();
    let creating = tokio::spawn({
        let admin = admin.clone();
        async move { create_pods(&admin, ns, pods).await }
    });

    eventually(60, "a binds 50 pods", || async {
        a.report().bound.len() >= 50
    })
    .await;
    a.task.abort();
    let _ = a.task.await;
    creating.await.unwrap();
    eventually(90, "400 pods bound", || async {
        placements(&admin, ns).await.len() == 400
    })
    .await;
    assert_within_allocatable(&admin, ns, name, 400).await;

    let (ra, rb) = (a.scheduler.report(), b.stop().await);
    assert!(
        ra.bound.len() >= 50 && rb.terms >= 1 && !rb.bound.is_empty(),
        "{ra:?} {rb:?}"
    );
    let by_a: HashSet<_> = ra.bound.iter().map(|x| x.pod.clone()).collect();
    let by_b: HashSet<_> = rb.bound.iter().map(|x| x.pod.clone()).collect();
    assert_eq!(by_a.len(), ra.bound.len());
    assert_eq!(by_b.len(), rb.bound.len());
    assert!(by_a.is_disjoint(&by_b));
    // The API server's count of binds, by answer: a second bind of a bound pod is a 409; a
    // bind of the killed leader cut off mid-request is counted a 504 whether or not it landed.
    let plane = &plane;
    let binds = |code: &'static str| {
        let labels = ["resource=\"pods\"", "subresource=\"binding\"", code];
        async move { plane.metric("apiserver_request_total", &labels).await }
    };
    let (all, conflicts) = (binds("").await, binds("code=\"409\"").await);
    let (accepted, cut) = (binds("code=\"201\"").await, binds("code=\"504\"").await);
    assert_eq!(conflicts, 0.0, "no pod was bound twice");
    assert_eq!(
        all,
        accepted + cut,
        "binds: {all} in all, {accepted} accepted, {cut} cut off"
    );
    assert!(accepted + cut >= 400.0 && accepted >= (ra.bound.len() + rb.bound.len()) as f64);
    let fencing: HashSet<_> = ra
        .bound
        .iter()
        .chain(&rb.bound)
        .map(|x| x.fencing_token)
        .collect();
    assert_eq!(fencing.len(), 2, "two terms bound pods: {fencing:?}");
}

/// The binary, as the README runs it: `--kubeconfig` from the control plane, a scheduler name
/// and a node pool; it prints a line for the pod it binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_binds_a_pod_through_a_kubeconfig() {
    let (ns, name) = ("sched-binary", "sched-binary");
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    namespace(&admin, ns).await;
    node(&admin, name, format!("{name}-0"), 1_000, GI).await;
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_pod_scheduler"))
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_file())
        .args(["--scheduler-name", name, "--id", "binary"])
        .args(["--nodes", &format!("pool={name}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let (lines, mut printed) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let _ = lines.send(line.unwrap_or_default());
        }
    });
    create_pods(&admin, ns, vec![pod("p", name, 100, MI, &[])]).await;
    let expected = format!("bound {ns}/p to {name}-0 (attempt 1)");
    let found = timeout(Duration::from_secs(60), async {
        while let Some(line) = printed.recv().await {
            if line == expected {
                return true;
            }
        }
        false
    });
    let found = found.await;
    drop(child);
    assert_eq!(found, Ok(true), "{expected:?} printed within 60 s");
    assert_eq!(
        placements(&admin, ns).await.get("p"),
        Some(&format!("{name}-0"))
    );
}
