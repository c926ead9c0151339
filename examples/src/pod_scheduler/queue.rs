//! The scheduler's queue: its events, its hint and its gate ([`pod_queue`]).

use ctrlq_queue_async::scheduling::{
    ActionType, ClusterEvent, ConfigError, EventPayload, HintError, PluginId, QueuedItem,
    QueueingHint, SchedulingQueue, SchedulingQueueConfig,
};

use super::resources::{PodInfo, Resources};

/// The scheduler's queue: pods by `namespace/name`.
pub type PodQueue = SchedulingQueue<String, PodInfo>;

/// The plugin that rejects a pod no node has room for (kube-scheduler's name for it).
pub const FIT: PluginId = "NodeResourcesFit";

/// The gate that holds a pod while its `spec.schedulingGates` is not empty.
pub const GATES: PluginId = "SchedulingGates";

/// A Node was added.
pub const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);

/// A Node's allocatable CPU or memory grew.
pub const NODE_ALLOCATABLE_UP: ClusterEvent =
    ClusterEvent::new("Node", ActionType::update_kind(0)).with_label("Node/UpdateNodeAllocatable");

/// A bound Pod was deleted or terminated, freeing what it requested on its node.
pub const ASSIGNED_POD_DELETE: ClusterEvent = ClusterEvent::new("AssignedPod", ActionType::DELETE);

/// A Pod's last scheduling gate was removed.
pub const POD_UNGATED: ClusterEvent = ClusterEvent::new("Pod", ActionType::update_kind(1))
    .with_label("Pod/UpdatePodSchedulingGatesEliminated");

/// What an event did for one node: the room it has left now. Every event the hints look at
/// carries one.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::{Freed, Resources};
///
/// let freed = Freed { node: "n1".into(), free: Resources::new(1_000, 1 << 30) };
/// assert!(Resources::new(500, 0).fits_in(&freed.free));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freed {
    /// The node.
    pub node: String,
    /// What it has left after the event.
    pub free: Resources,
}

/// A queue with this scheduler's hints and gate: [`FIT`]'s hint on [`NODE_ADD`],
/// [`NODE_ALLOCATABLE_UP`] and [`ASSIGNED_POD_DELETE`] answers `Queue` only when the pod fits
/// in the room the event left on its node ([`Freed`]); [`GATES`] holds a gated pod until
/// [`POD_UNGATED`].
///
/// # Errors
///
/// [`ConfigError`] when `config` is inconsistent.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{EventPayload, SchedulingQueueConfig, SubQueue};
/// use examples::pod_scheduler::{FIT, Freed, NODE_ADD, PodInfo, Resources, pod_queue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = pod_queue(SchedulingQueueConfig::default()).unwrap();
/// let pod = PodInfo {
///     namespace: "ns".into(), name: "big".into(), uid: None,
///     requests: Resources::new(4_000, 0), priority: 0, gated: false,
/// };
/// queue.add(pod.key(), pod).unwrap();
/// let mut popped = queue.pop().await.unwrap();
/// popped.set_rejectors([FIT]); // no node had room
/// let cycle = popped.cycle();
/// queue.add_unschedulable_if_not_present(popped, cycle).unwrap();
///
/// let small = Freed { node: "n1".into(), free: Resources::new(2_000, 0) };
/// assert_eq!(queue.move_all_with(&NODE_ADD, EventPayload::new(small)), 0);
/// let large = Freed { node: "n2".into(), free: Resources::new(8_000, 0) };
/// assert_eq!(queue.move_all_with(&NODE_ADD, EventPayload::new(large)), 1);
/// assert_ne!(queue.where_is(&"ns/big".to_owned()), Some(SubQueue::Unschedulable));
/// # }
/// ```
pub fn pod_queue(config: SchedulingQueueConfig) -> Result<PodQueue, ConfigError> {
    let mut builder = SchedulingQueue::builder(config);
    for event in [NODE_ADD, NODE_ALLOCATABLE_UP, ASSIGNED_POD_DELETE] {
        builder = builder.hint(event, FIT, fits_in_freed);
    }
    builder
        .gate(
            GATES,
            [POD_UNGATED],
            |item: &QueuedItem<String, PodInfo>| !item.data().gated,
        )
        .build()
}

/// [`FIT`]'s hint: the event can help the pod only if the pod fits in what it left free.
fn fits_in_freed(
    item: &QueuedItem<String, PodInfo>,
    _event: &ClusterEvent,
    payload: &EventPayload,
) -> Result<QueueingHint, HintError> {
    let freed = payload
        .get::<Freed>()
        .ok_or_else(|| HintError::new("the event carries no freed room"))?;
    Ok(if item.data().requests.fits_in(&freed.free) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}
