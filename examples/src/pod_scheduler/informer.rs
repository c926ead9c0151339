//! The term's three watches (Nodes, bound Pods, this scheduler's unscheduled Pods) and what
//! each of their events does to the cache and the queue.

use std::collections::HashSet;
use std::pin::pin;

use ctrlq_queue_async::scheduling::{ClusterEvent, EventPayload};
use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Config, Event, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio::sync::watch;

use super::queue::{ASSIGNED_POD_DELETE, Freed, NODE_ADD, NODE_ALLOCATABLE_UP, POD_UNGATED};
use super::resources::{PodInfo, Resources};
use super::scheduler::{SchedulerConfig, Term, View, lock};

/// The watches of one term, applied in the order they arrive.
#[derive(Debug)]
pub(super) struct Informers {
    term: Term,
    scheduler_name: String,
    node_selector: Option<String>,
}

/// An event of one of the three watches.
enum Change {
    Node(watcher::Result<Event<Node>>),
    Bound(watcher::Result<Event<Pod>>),
    Pending(watcher::Result<Event<Pod>>),
}

/// Per watch: the names a relist has shown so far (`Some` during a relist), and whether its
/// first list is complete.
#[derive(Debug, Default)]
struct Relist {
    seen: Option<HashSet<String>>,
    synced: bool,
}

// ===== impl Informers =====

impl Informers {
    pub(super) fn new(term: Term, config: &SchedulerConfig) -> Self {
        Informers {
            term,
            scheduler_name: config.scheduler_name.clone(),
            node_selector: config.node_selector.clone(),
        }
    }

    /// Runs the watches (for ever: each error is counted and retried with a backoff); sets
    /// `synced` once each has listed.
    pub(super) async fn run(self, synced: watch::Sender<bool>) {
        let client = self.term.client.clone();
        let unscheduled = format!(
            "spec.nodeName=,spec.schedulerName={},status.phase!=Succeeded,status.phase!=Failed",
            self.scheduler_name
        );
        let bound = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";
        let mut nodes = Config::default();
        if let Some(selector) = &self.node_selector {
            nodes = nodes.labels(selector);
        }
        let nodes = watch_all::<Node>(&client, nodes).map(Change::Node);
        let bound = watch_all::<Pod>(&client, Config::default().fields(bound)).map(Change::Bound);
        let pending = watch_all::<Pod>(&client, Config::default().fields(&unscheduled));
        let all = stream::select(stream::select(nodes, bound), pending.map(Change::Pending));
        let mut all = pin!(all);
        let mut relists: [Relist; 3] = Default::default();
        while let Some(change) = all.next().await {
            let (i, result) = match change {
                Change::Node(r) => (0, r.map(|e| self.on_node(e, &mut relists[0]))),
                Change::Bound(r) => (1, r.map(|e| self.on_bound(e, &mut relists[1]))),
                Change::Pending(r) => (2, r.map(|e| self.on_pending(e, &mut relists[2]))),
            };
            if let Err(error) = result {
                tracing::debug!(watch = i, %error, "watch failed; retrying");
                self.term.report.with(|r| r.watch_errors += 1);
            }
            if relists.iter().all(|r| r.synced) {
                synced.send_if_modified(|s| !std::mem::replace(s, true));
            }
        }
    }

    fn on_node(&self, event: Event<Node>, relist: &mut Relist) {
        let mut view = lock(&self.term.view);
        match relist.step(event) {
            Step::Applied(node) => self.node_applied(&mut view, &node),
            Step::Deleted(node) => view.cache.remove_node(&node.name_any()),
            Step::Listed(seen) => {
                let gone: Vec<String> =
                    view.cache.node_names().difference(&seen).cloned().collect();
                for name in gone {
                    view.cache.remove_node(&name);
                }
            }
            Step::None => {}
        }
    }

    /// A node added or its allocatable grown: the pods that now fit there may move.
    fn node_applied(&self, view: &mut View, node: &Node) {
        let name = node.name_any();
        let Ok(allocatable) = Resources::allocatable(node) else {
            self.term.report.with(|r| r.unreadable += 1);
            return;
        };
        let event = match view.cache.set_node(&name, allocatable) {
            None => NODE_ADD,
            Some(old)
                if allocatable.cpu_millis > old.cpu_millis
                    || allocatable.memory_bytes > old.memory_bytes =>
            {
                NODE_ALLOCATABLE_UP
            }
            Some(_) => return,
        };
        self.moved(view, &event, name);
    }

    fn on_bound(&self, event: Event<Pod>, relist: &mut Relist) {
        let mut view = lock(&self.term.view);
        match relist.step(event) {
            Step::Applied(pod) => {
                let Some(node) = node_of(&pod) else { return };
                let Ok(info) = PodInfo::from_pod(&pod) else {
                    self.term.report.with(|r| r.unreadable += 1);
                    return;
                };
                let key = info.key();
                view.cache.confirm(&key, node, info.requests);
                // Bound: whoever bound it, it leaves the queue.
                view.pending.remove(&key);
                self.term.queue.delete(&key);
            }
            Step::Deleted(pod) => self.freed(&mut view, &key_of(&pod)),
            Step::Listed(seen) => {
                for gone in view.cache.confirmed_pods_not_in(&seen) {
                    self.freed(&mut view, &gone);
                }
            }
            Step::None => {}
        }
    }

    /// A bound pod deleted or terminated: the pods that now fit on its node may move.
    fn freed(&self, view: &mut View, key: &str) {
        if let Some((node, _)) = view.cache.remove_pod(key) {
            self.moved(view, &ASSIGNED_POD_DELETE, node);
        }
    }

    /// Moves the unschedulable pods that fit in what `node` has free now.
    fn moved(&self, view: &mut View, event: &ClusterEvent, node: String) {
        let Some(free) = view.cache.free(&node) else {
            return;
        };
        let payload = EventPayload::new(Freed { node, free });
        let moved = self.term.queue.move_all_with(event, payload);
        if moved > 0 {
            tracing::debug!(event = event.label, moved, "moved unschedulable pods");
            self.term.report.with(|r| r.moved_by_events += moved as u64);
        }
    }

    fn on_pending(&self, event: Event<Pod>, relist: &mut Relist) {
        let mut view = lock(&self.term.view);
        match relist.step(event) {
            Step::Applied(pod) => {
                let Ok(info) = PodInfo::from_pod(&pod) else {
                    self.term.report.with(|r| r.unreadable += 1);
                    return;
                };
                let key = info.key();
                if node_of(&pod).is_some() || view.cache.has_pod(&key) {
                    return; // bound; its watch has not caught up yet
                }
                view.pending.insert(key.clone());
                let events: &[ClusterEvent] = if info.gated { &[] } else { &[POD_UNGATED] };
                self.term.queue.update(key, info, events);
            }
            Step::Deleted(pod) => {
                let key = key_of(&pod);
                view.pending.remove(&key);
                self.term.queue.delete(&key);
            }
            Step::Listed(seen) => {
                let gone: Vec<String> = view.pending.difference(&seen).cloned().collect();
                for key in gone {
                    view.pending.remove(&key);
                    self.term.queue.delete(&key);
                }
            }
            Step::None => {}
        }
    }
}

/// What a watch event amounts to.
enum Step<K> {
    Applied(K),
    Deleted(K),
    /// A relist is complete: the names it showed.
    Listed(HashSet<String>),
    None,
}

impl Relist {
    fn step<K: Resource>(&mut self, event: Event<K>) -> Step<K> {
        match event {
            Event::Init => {
                self.seen = Some(HashSet::new());
                Step::None
            }
            Event::InitApply(object) => {
                self.seen.get_or_insert_default().insert(key_of(&object));
                Step::Applied(object)
            }
            Event::InitDone => {
                self.synced = true;
                Step::Listed(self.seen.take().unwrap_or_default())
            }
            Event::Apply(object) => Step::Applied(object),
            Event::Delete(object) => Step::Deleted(object),
        }
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn key_of<K: Resource>(object: &K) -> String {
    match object.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.meta().name.as_deref().unwrap_or_default()),
        None => object.meta().name.clone().unwrap_or_default(),
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    let node = pod.spec.as_ref()?.node_name.as_deref()?;
    (!node.is_empty()).then_some(node)
}

/// A watch of every `K` matching `config`, retried with kube-runtime's default backoff.
fn watch_all<K>(
    client: &kube::Client,
    config: Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + use<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(Api::<K>::all(client.clone()), config).default_backoff()
}
