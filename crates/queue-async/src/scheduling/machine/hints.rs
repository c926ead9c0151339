//! Queueing hints and pre-enqueue gates: how the queue decides where a failed item goes, on
//! the events of `event`.

use std::fmt;
use std::sync::Arc;

use hashbrown::HashMap;

use super::event::{ClusterEvent, EventPayload};
use super::item::{PluginId, QueuedItem, add_plugin};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintError(String);

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
    pub(crate) hints: Vec<(ClusterEvent, PluginId, HintFn<K, T>)>,
    pub(crate) gates: Vec<Gate<K, T>>,
}

/// A registered gate: its plugin, the events that let it run again, and the gate.
type Gate<K, T> = (PluginId, Vec<ClusterEvent>, GateFn<K, T>);

// ===== impl HintError =====

impl HintError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        HintError(message.into())
    }
}

impl fmt::Display for HintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queueing hint failed: {}", self.0)
    }
}

impl std::error::Error for HintError {}

// ===== impl Hooks =====

impl<K, T> Hooks<K, T> {
    pub(crate) fn new() -> Self {
        Hooks {
            hints: Vec::new(),
            gates: Vec::new(),
        }
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
}

impl<K, T> Hooks<K, T> {
    /// Whether `event` is one the gate `plugin` registered for (a wildcard is not, unless the
    /// gate registered the wildcard).
    fn ungates(&self, plugin: PluginId, event: &ClusterEvent) -> bool {
        self.gates
            .iter()
            .filter(|(p, _, _)| *p == plugin)
            .any(|(_, evs, _)| evs.iter().any(|reg| reg.matches(event)))
    }

    /// Runs the gates on `item` (those of the plugin that held it last go first) and records
    /// the answer in it: true if a gate refused, which then holds it.
    pub(crate) fn gate_in_place(&self, item: &mut QueuedItem<K, T>) -> bool {
        let last = item.info().gating;
        let held_last = self.gates.iter().filter(|(p, _, _)| Some(*p) == last);
        let others = self.gates.iter().filter(|(p, _, _)| Some(*p) != last);
        let refused = held_last.chain(others).find(|(_, _, gate)| !gate(item));
        match refused.map(|(plugin, _, _)| *plugin) {
            Some(plugin) => {
                let marks = item.marks_mut();
                marks.gating = Some(plugin);
                add_plugin(&mut marks.rejectors, plugin);
                true
            }
            None => {
                if item.is_gated() {
                    item.marks_mut().gating = None;
                }
                false
            }
        }
    }

    /// The hints registered for events matching `event`, indexed by plugin: made once per
    /// event, so a move over many items looks up each item's few plugins instead of comparing
    /// every registration's plugin per item.
    pub(crate) fn hints_for(&self, event: &ClusterEvent) -> EventHints<K, T> {
        let list: Vec<_> = self
            .hints
            .iter()
            .filter(|(reg, _, _)| reg.matches(event))
            .map(|(_, plugin, hint)| (*plugin, hint.clone()))
            .collect();
        let mut by_plugin: HashMap<PluginId, Vec<usize>> = HashMap::new();
        for (i, (plugin, _)) in list.iter().enumerate() {
            by_plugin.entry(*plugin).or_default().push(i);
        }
        EventHints { list, by_plugin }
    }

    /// Whether the event `event` (targeted at `target`, if any), whose matching hints are
    /// `hints`, makes `item` worth requeueing.
    ///
    /// A gated item moves only on an event its gate registered for, and then only to be gated
    /// again or let in: hints are not asked.
    pub(crate) fn strategy(
        &self,
        hints: &EventHints<K, T>,
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
pub(crate) struct EventHints<K, T> {
    list: Vec<(PluginId, HintFn<K, T>)>,
    by_plugin: HashMap<PluginId, Vec<usize>>,
}

/// Asks the rejectors' hints in registration order; the strongest answer wins.
fn ask_hints<K, T>(
    hints: &EventHints<K, T>,
    item: &QueuedItem<K, T>,
    event: &ClusterEvent,
    payload: &EventPayload,
) -> Strategy {
    let marks = item.info();
    let (rejectors, pending) = (&marks.rejectors[..], &marks.pending[..]);
    let all: Vec<usize>;
    let positions: &[usize] = match (rejectors, pending) {
        ([one], []) | ([], [one]) => hints.by_plugin.get(one).map_or(&[], Vec::as_slice),
        _ => {
            let asked = |&i: &usize| {
                rejectors.contains(&hints.list[i].0) || pending.contains(&hints.list[i].0)
            };
            all = (0..hints.list.len()).filter(asked).collect();
            &all
        }
    };
    let mut found = Strategy::Skip;
    for &i in positions {
        let (plugin, hint) = &hints.list[i];
        let pending = marks.pending.contains(plugin);
        // Requeueing too often is safer than never: a failed hint counts as `Queue`.
        match hint(item, event, payload).unwrap_or(QueueingHint::Queue) {
            QueueingHint::Skip => {}
            QueueingHint::Queue if pending => return Strategy::Immediately,
            QueueingHint::Queue if marks.pending.is_empty() => return Strategy::AfterBackoff,
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
