//! A small Kubernetes scheduler on ctrlq's [`SchedulingQueue`]: it places the Pods whose
//! `spec.schedulerName` names it on Nodes with room for their CPU and memory requests, beside
//! (or instead of) kube-scheduler, on a real API server.
//!
//! - Three kube-runtime watchers feed it: unscheduled Pods naming this scheduler (field
//!   selector `spec.nodeName=`), every Node, and every bound, non-terminal Pod (for the
//!   capacity each node has left). A Pod's add, update and delete reach the queue; a Pod with
//!   `spec.schedulingGates` waits behind the queue's gate until its gates are removed.
//! - One cycle per pop ([`Cache::pick`]): the Nodes with room for the Pod (allocatable minus
//!   what is bound there, counting the Pods this scheduler bound before the watch confirms
//!   them), scored by least allocated; the bind goes through the `pods/binding` subresource.
//! - A Pod that fits nowhere goes back to the queue as unschedulable, rejected by [`FIT`], and
//!   its `PodScheduled` condition says why ("0/3 nodes are available: 3 Insufficient cpu."); a
//!   bind that fails goes to backoff as an error.
//! - Queueing hints move exactly the unschedulable Pods an event can help, at once: a Node
//!   added ([`NODE_ADD`]) or given more allocatable ([`NODE_ALLOCATABLE_UP`]), and a bound Pod
//!   deleted ([`ASSIGNED_POD_DELETE`]), carry the room that node has left ([`Freed`]); a Pod
//!   moves only if it fits in that room.
//! - Replicas hold a Lease ([`ctrlq_leader::LeaseLock`]); only the leader watches and binds,
//!   each term from a fresh list, and no bind is sent once its term's grant no longer holds.
//!
//! Not here (kube-scheduler's other plugins): preemption, pod groups (gang scheduling),
//! extenders, affinity, taints and tolerations, topology spread, volumes and the pod-count
//! limit of a node.
//!
//! [`SchedulingQueue`]: ctrlq_queue_async::scheduling::SchedulingQueue

mod bind;
mod cache;
mod informer;
mod queue;
mod resources;
mod scheduler;

pub use cache::{Cache, Unfit};
pub use queue::{
    ASSIGNED_POD_DELETE, FIT, Freed, GATES, NODE_ADD, NODE_ALLOCATABLE_UP, POD_UNGATED, PodQueue,
    pod_queue,
};
pub use resources::{Lack, PodInfo, QuantityError, Resources, parse_quantity_millis};
pub use scheduler::{Bound, Error, Report, Scheduler, SchedulerConfig};
