//! The events the scheduling queue hears about: [`ClusterEvent`] (a resource kind and an
//! [`ActionType`] set) and the [`EventPayload`] that comes with one.

use std::any::Any;
use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

/// What happened in the world, as far as the queue cares: a resource kind and an action set.
///
/// A registered event matches an incoming one when it is the wildcard, or when the resources
/// are equal (or the registered one is `"*"`) and the incoming actions are a non-empty subset
/// of the registered ones. The wildcard (`"*"` with [`ActionType::ALL`]) means "anything may
/// have changed": it moves every item without consulting hints.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{ActionType, ClusterEvent};
///
/// let node_update = ClusterEvent::new("Node", ActionType::UPDATE);
/// let label_change = ClusterEvent::new("Node", ActionType::update_kind(0));
/// assert!(node_update.matches(&label_change));
/// assert!(!label_change.matches(&node_update));
/// assert!(ClusterEvent::UNSCHEDULABLE_TIMEOUT.is_wildcard());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// The resource kind, `"*"` for any.
    pub resource: &'static str,
    /// The actions.
    pub actions: ActionType,
    /// A label for logs (the named wildcards carry one).
    pub label: &'static str,
}

/// A set of actions on a resource: add, delete, and up to 30 distinct kinds of update.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::ActionType;
///
/// let both = ActionType::ADD | ActionType::DELETE;
/// assert!(both.contains(ActionType::ADD));
/// assert!(ActionType::UPDATE.contains(ActionType::update_kind(3)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActionType(u32);

/// The caller's object that came with an event (kube-scheduler passes the old and new objects),
/// handed to the hints: cheap to clone, shared by every hint that looks at it, and kept with
/// the event while items are in flight so that a hint replaying it later sees it too.
///
/// Any `Send + Sync + 'static` value fits; a hint reads it back by type with [`get`](Self::get).
/// To pass both the old and the new object, pass a pair or a struct of your own.
///
/// # Examples
///
/// "Does the added node have room for this item": the item's data is the room it needs.
///
/// ```
/// use ctrlq_queue_async::scheduling::{
///     ActionType, ClusterEvent, EventPayload, HintError, QueueingHint, SchedulingQueue,
///     SchedulingQueueConfig, SubQueue,
/// };
///
/// struct Node {
///     room: u32,
/// }
/// const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, u32>::builder(SchedulingQueueConfig::default())
///     .hint(NODE_ADD, "Fit", |item, _event, payload| {
///         let node = payload.get::<Node>().ok_or_else(|| HintError::new("no node"))?;
///         Ok(if node.room >= *item.data() { QueueingHint::Queue } else { QueueingHint::Skip })
///     })
///     .build()
///     .unwrap();
/// queue.add("pod", 4).unwrap();
/// let mut pod = queue.pop().await.unwrap();
/// pod.set_rejectors(["Fit"]);
/// queue.add_unschedulable_if_not_present(pod, queue.scheduling_cycle()).unwrap();
///
/// let small = EventPayload::new(Node { room: 2 });
/// assert_eq!(queue.move_matching_with(&NODE_ADD, small, |_| true), 0);
/// let large = EventPayload::new(Node { room: 8 });
/// assert_eq!(queue.move_matching_with(&NODE_ADD, large, |_| true), 1);
/// assert_ne!(queue.where_is(&"pod"), Some(SubQueue::Unschedulable));
/// # }
/// ```
#[derive(Clone, Default)]
pub struct EventPayload(Option<Arc<dyn Any + Send + Sync>>);

// ===== impl ClusterEvent =====

impl ClusterEvent {
    /// The wildcard raised by the leftover flush for items unschedulable for too long.
    pub const UNSCHEDULABLE_TIMEOUT: ClusterEvent = ClusterEvent {
        resource: "*",
        actions: ActionType::ALL,
        label: "UnschedulableTimeout",
    };

    /// The wildcard [`activate`] records for an item that is in flight (targeted at it).
    ///
    /// [`activate`]: crate::scheduling::SchedulingQueue::activate
    pub const FORCE_ACTIVATE: ClusterEvent = ClusterEvent {
        resource: "*",
        actions: ActionType::ALL,
        label: "ForceActivate",
    };

    /// An event on `resource` with `actions`, labelled after the resource.
    pub const fn new(resource: &'static str, actions: ActionType) -> Self {
        ClusterEvent {
            resource,
            actions,
            label: resource,
        }
    }

    /// The same event with another log label.
    #[must_use]
    pub const fn with_label(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }

    /// Whether this is a wildcard: any resource, every action.
    pub fn is_wildcard(&self) -> bool {
        self.resource == "*" && self.actions == ActionType::ALL
    }

    /// Whether this event, as registered, covers the `incoming` one.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        if self.is_wildcard() {
            return true;
        }
        let resource = self.resource == "*" || self.resource == incoming.resource;
        let actions =
            incoming.actions.0 & self.actions.0 != 0 && incoming.actions.0 & !self.actions.0 == 0;
        resource && actions
    }
}

impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label)
    }
}

// ===== impl EventPayload =====

impl EventPayload {
    /// No payload: what events without one (the wildcards, updates) carry.
    pub const fn none() -> Self {
        EventPayload(None)
    }

    /// A payload holding `value`.
    pub fn new<P: Any + Send + Sync>(value: P) -> Self {
        EventPayload(Some(Arc::new(value)))
    }

    /// The value, if there is one and it is a `P`.
    pub fn get<P: Any>(&self) -> Option<&P> {
        self.0.as_deref()?.downcast_ref()
    }

    /// Whether there is no value.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }
}

impl fmt::Debug for EventPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_none() {
            "EventPayload(None)"
        } else {
            "EventPayload(..)"
        })
    }
}

// ===== impl ActionType =====

impl ActionType {
    /// Creation.
    pub const ADD: ActionType = ActionType(1);
    /// Deletion.
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// Any kind of update (the union of every [`update_kind`](Self::update_kind)).
    pub const UPDATE: ActionType = ActionType(!0b11);
    /// Every action.
    pub const ALL: ActionType = ActionType(u32::MAX);

    /// One specific kind of update, `kind` in `0..30` (clamped to 29), for example "label
    /// changed"; [`UPDATE`](Self::UPDATE) covers all of them.
    pub const fn update_kind(kind: u8) -> ActionType {
        let kind = if kind > 29 { 29 } else { kind };
        ActionType(1 << (kind + 2))
    }

    /// Whether every action of `other` is in `self`.
    pub const fn contains(self, other: ActionType) -> bool {
        other.0 & !self.0 == 0
    }
}

impl BitOr for ActionType {
    type Output = ActionType;
    fn bitor(self, rhs: ActionType) -> ActionType {
        ActionType(self.0 | rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_follows_resource_and_action_subsets() {
        let node_add = ClusterEvent::new("Node", ActionType::ADD);
        let any_add = ClusterEvent::new("*", ActionType::ADD);
        let all = ClusterEvent::new("*", ActionType::ALL);
        let label_or_taint = ClusterEvent::new(
            "Node",
            ActionType::update_kind(0) | ActionType::update_kind(1),
        );
        assert!(any_add.matches(&node_add));
        assert!(all.matches(&label_or_taint));
        assert!(!node_add.matches(&ClusterEvent::new("Pv", ActionType::ADD)));
        assert!(ClusterEvent::new("Node", ActionType::UPDATE).matches(&label_or_taint));
        assert!(!ClusterEvent::new("Node", ActionType::update_kind(0)).matches(&label_or_taint));
        // An incoming wildcard matches only a registered wildcard.
        assert!(!node_add.matches(&ClusterEvent::UNSCHEDULABLE_TIMEOUT));
    }

    #[test]
    fn update_kind_is_clamped_and_inside_update() {
        assert_eq!(ActionType::update_kind(200), ActionType::update_kind(29));
        assert!(ActionType::UPDATE.contains(ActionType::update_kind(29)));
        assert!(!ActionType::UPDATE.contains(ActionType::ADD));
    }
}
