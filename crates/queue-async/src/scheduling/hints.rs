//! Events, queueing hints and pre-enqueue gates: how the queue decides where a failed item goes.

use std::any::Any;
use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use hashbrown::HashMap;

use super::item::{PluginId, QueuedItem};

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

/// The answer of a hint about one item and one event.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::QueueingHint;
/// assert_ne!(QueueingHint::Queue, QueueingHint::Skip);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    /// The event cannot help this item: leave it where it is.
    Skip,
    /// The event may help: queue the item again (after its backoff, or at once for a pending
    /// plugin).
    Queue,
}

/// A hint that failed; the queue treats it as [`QueueingHint::Queue`] (requeueing too often is
/// safer than never).
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::HintError;
/// assert_eq!(HintError::new("cache miss").to_string(), "queueing hint failed: cache miss");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queueing hint failed: {0}")]
pub struct HintError(String);

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
/// assert_eq!(queue.move_all_with(&NODE_ADD, EventPayload::new(Node { room: 2 })), 0);
/// assert_eq!(queue.move_all_with(&NODE_ADD, EventPayload::new(Node { room: 8 })), 1);
/// assert_ne!(queue.where_is(&"pod"), Some(SubQueue::Unschedulable));
/// # }
/// ```
#[derive(Clone, Default)]
pub struct EventPayload(Option<Arc<dyn Any + Send + Sync>>);

/// A queueing hint: may `event`, with its `payload`, help `item` (rejected by the hint's
/// plugin) to succeed?
pub type HintFn<K, T> = Arc<
    dyn Fn(&QueuedItem<K, T>, &ClusterEvent, &EventPayload) -> Result<QueueingHint, HintError>
        + Send
        + Sync,
>;

/// A pre-enqueue gate: `true` lets the item into the active or backoff sub-queue.
pub type GateFn<K, T> = Arc<dyn Fn(&QueuedItem<K, T>) -> bool + Send + Sync>;

/// Where a failed or moved item should go; ordered from weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Strategy {
    Skip,
    AfterBackoff,
    Immediately,
}

/// The registry of hints and gates a queue consults, in registration order (deterministic).
pub(crate) struct Hooks<K, T> {
    hints: Vec<(ClusterEvent, PluginId, HintFn<K, T>)>,
    gates: Vec<(PluginId, Vec<ClusterEvent>, GateFn<K, T>)>,
}

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
    /// [`activate`]: super::SchedulingQueue::activate
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

// ===== impl HintError =====

impl HintError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        HintError(message.into())
    }
}

// ===== impl Hooks =====

impl<K, T> Hooks<K, T> {
    pub(crate) fn new() -> Self {
        Hooks {
            hints: Vec::new(),
            gates: Vec::new(),
        }
    }

    pub(crate) fn add_hint(&mut self, event: ClusterEvent, plugin: PluginId, hint: HintFn<K, T>) {
        self.hints.push((event, plugin, hint));
    }

    pub(crate) fn add_gate(
        &mut self,
        plugin: PluginId,
        events: Vec<ClusterEvent>,
        gate: GateFn<K, T>,
    ) {
        self.gates.push((plugin, events, gate));
    }

    /// Whether any hint or gate could care about `event`; others are dropped without a scan.
    pub(crate) fn is_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard()
            || self.hints.iter().any(|(reg, _, _)| reg.matches(event))
            || self
                .gates
                .iter()
                .any(|(_, evs, _)| evs.iter().any(|reg| reg.matches(event)))
    }

    /// Whether `event` is one the gate `plugin` registered for (a wildcard is not, unless the
    /// gate registered the wildcard).
    pub(crate) fn ungates(&self, plugin: PluginId, event: &ClusterEvent) -> bool {
        self.gates
            .iter()
            .filter(|(p, _, _)| *p == plugin)
            .any(|(_, evs, _)| evs.iter().any(|reg| reg.matches(event)))
    }

    /// Runs the gates (the one that held the item last goes first); the first that refuses.
    pub(crate) fn gate(&self, item: &QueuedItem<K, T>) -> Option<PluginId> {
        if let Some(last) = item.info().gating {
            let refused = self
                .gates
                .iter()
                .filter(|(p, _, _)| *p == last)
                .any(|(_, _, gate)| !gate(item));
            if refused {
                return Some(last);
            }
        }
        self.gates
            .iter()
            .filter(|(p, _, _)| Some(*p) != item.info().gating)
            .find(|(_, _, gate)| !gate(item))
            .map(|(p, _, _)| *p)
    }

    /// Whether the event `event` (targeted at `target`, if any) makes `item` worth requeueing.
    ///
    /// A gated item moves only on an event its gate registered for, and then only to be gated
    /// again or let in: hints are not asked.
    pub(crate) fn strategy(
        &self,
        item: &QueuedItem<K, T>,
        event: &ClusterEvent,
        payload: &EventPayload,
        target: Option<&K>,
    ) -> Strategy
    where
        K: PartialEq,
    {
        self.strategy_with(&self.hints_for(event), item, event, payload, target)
    }

    /// The hints registered for events matching `event`, indexed by plugin; computed once per
    /// event so a move over many items looks up each item's few plugins instead of scanning
    /// every registration per item.
    pub(crate) fn hints_for(&self, event: &ClusterEvent) -> EventHints<'_, K, T> {
        let list: Vec<_> = self
            .hints
            .iter()
            .filter(|(reg, _, _)| reg.matches(event))
            .map(|(_, plugin, hint)| (*plugin, hint))
            .collect();
        let mut by_plugin: HashMap<PluginId, Vec<usize>> = HashMap::new();
        for (i, (plugin, _)) in list.iter().enumerate() {
            by_plugin.entry(*plugin).or_default().push(i);
        }
        EventHints { list, by_plugin }
    }

    /// [`strategy`](Self::strategy) with the matching hints already selected.
    pub(crate) fn strategy_with(
        &self,
        hints: &EventHints<'_, K, T>,
        item: &QueuedItem<K, T>,
        event: &ClusterEvent,
        payload: &EventPayload,
        target: Option<&K>,
    ) -> Strategy
    where
        K: PartialEq,
    {
        if target.is_some_and(|t| *t != item.key) {
            return Strategy::Skip;
        }
        if let Some(gate) = item.info().gating {
            return if self.ungates(gate, event) {
                Strategy::AfterBackoff
            } else {
                Strategy::Skip
            };
        }
        if item.has_no_rejectors() || event.is_wildcard() {
            return Strategy::AfterBackoff;
        }
        ask_hints(hints, item, event, payload)
    }
}

/// The hints matching one event, in registration order, and their positions by plugin.
pub(crate) struct EventHints<'a, K, T> {
    list: Vec<(PluginId, &'a HintFn<K, T>)>,
    by_plugin: HashMap<PluginId, Vec<usize>>,
}

/// Asks the rejectors' hints in registration order; the strongest answer wins.
fn ask_hints<K, T>(
    hints: &EventHints<'_, K, T>,
    item: &QueuedItem<K, T>,
    event: &ClusterEvent,
    payload: &EventPayload,
) -> Strategy {
    let (rejectors, pending) = (
        item.info().rejectors.as_slice(),
        item.info().pending.as_slice(),
    );
    let lookup = |p: &PluginId| hints.by_plugin.get(p).map_or(&[][..], Vec::as_slice);
    let mut order: Vec<usize>;
    let positions: &[usize] = match (rejectors, pending) {
        ([one], []) | ([], [one]) => lookup(one),
        _ => {
            order = rejectors
                .iter()
                .chain(pending)
                .flat_map(lookup)
                .copied()
                .collect();
            order.sort_unstable();
            order.dedup();
            &order
        }
    };
    let mut found = Strategy::Skip;
    for &i in positions {
        let (plugin, hint) = &hints.list[i];
        let pending = item.info().pending.contains(plugin);
        let answer = match hint(item, event, payload) {
            Ok(answer) => answer,
            Err(error) => {
                tracing::debug!(plugin, event = event.label, %error, "hint failed; treated as queue");
                QueueingHint::Queue
            }
        };
        match answer {
            QueueingHint::Skip => {}
            QueueingHint::Queue if pending => return Strategy::Immediately,
            QueueingHint::Queue if item.info().pending.is_empty() => return Strategy::AfterBackoff,
            QueueingHint::Queue => found = Strategy::AfterBackoff,
        }
    }
    found
}

impl<K, T> fmt::Debug for Hooks<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("hints", &self.hints.len())
            .field("gates", &self.gates.len())
            .finish()
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
