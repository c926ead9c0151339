//! [`SchedulingRules`]: the settings, hints and gates of a scheduling state, and every
//! transition, each over the half ([`Parked`] or [`Ready`]) it touches, so a concurrent queue
//! can hold each half under its own lock and take them in the order it chooses.
//!
//! # Invariants
//!
//! 1. Every queued key is in exactly one of active, backoff and unschedulable (DESIGN.md, 3).
//!    A key may additionally be in flight (popped, not yet done).
//! 2. An item inside a heap is never mutated in a way that changes its order, except through
//!    `KeyedHeap::update`, which re-sifts it (kubernetes/kubernetes#97302).

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::active::RecordedEvent;
use super::backoff;
use super::config::SchedulingQueueConfig;
use super::event::{ClusterEvent, EventPayload};
use super::hints::{HintError, Hooks, QueueingHint, Strategy};
use super::item::QueuedItem;
use super::parts::Parked;
use super::plugins::PluginId;

/// The settings, hints and gates of a scheduling queue, and its transitions.
///
/// The queue keeps the rules shared and read-only, guards [`Parked`] and [`Ready`] with locks
/// of its own, and calls the steps here in between. No step reads a clock: each takes `now`.
///
/// [`Ready`]: super::Ready
pub(crate) struct SchedulingRules<K, T> {
    pub(crate) config: SchedulingQueueConfig,
    pub(crate) hooks: Hooks<K, T>,
}

/// Where an item goes once its gates and backoff are known: what [`SchedulingRules::commit`]
/// inserts.
#[derive(Debug)]
pub(crate) enum Placement<K, T> {
    /// Ready to pop.
    Active(QueuedItem<K, T>),
    /// Waiting out its backoff, until the instant given.
    Backoff(QueuedItem<K, T>, Instant),
    /// Waiting for an event (rejected or gated).
    Unschedulable(QueuedItem<K, T>),
}

/// Whom a transition asks the caller to wake, once its locks are released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wake {
    /// An item went to active (or to backoff with pop-from-backoff on): a waiting pop can
    /// take it.
    pub(crate) pop: bool,
    /// The earliest deadline (backoff expiry or leftover) got earlier: re-arm the timer.
    pub(crate) timer: bool,
    /// An item went where only a timed move takes it out (backoff, unschedulable).
    pub(crate) flush: bool,
}

/// An item popped: it, its flight id (never reused) and the scheduling cycle it was popped in.
#[derive(Debug)]
pub(crate) struct Flight<K, T> {
    /// The item, outside the state until it is done or handed back.
    pub(crate) item: QueuedItem<K, T>,
    /// The flight's id: handing the item back with it ends this flight and no later one.
    pub(crate) id: u64,
    /// The scheduling cycle the item was popped in.
    pub(crate) cycle: u64,
}

/// What [`SchedulingRules::claim_return`] found about an item handed back.
#[derive(Debug)]
pub(crate) enum Return<K, T> {
    /// Taken back: place it with [`SchedulingRules::requeue`].
    Accepted(Returned<K, T>),
    /// Its key is queued already: the item is handed back and nothing changed.
    AlreadyQueued(QueuedItem<K, T>),
    /// Its flight had already ended (a guard dropped after `done`, or a close): nothing to do.
    Ended,
}

/// An item taken back after a failed attempt, with the events it missed while in flight (if
/// it was in flight here); [`SchedulingRules::requeue`] places it.
#[derive(Debug)]
pub(crate) struct Returned<K, T> {
    item: QueuedItem<K, T>,
    missed: Missed<K>,
}

/// The events an item missed while in flight; `None` if it was not in flight here.
type Missed<K> = Option<Vec<RecordedEvent<K>>>;

// ===== impl SchedulingRules =====

impl<K, T> SchedulingRules<K, T> {
    /// Rules with `config`, no hints and no gates. [`SchedulingQueueConfig::validate`] is
    /// checked when a state is built from them.
    pub(crate) fn new(config: SchedulingQueueConfig) -> Self {
        SchedulingRules {
            config,
            hooks: Hooks::new(),
        }
    }

    /// The settings.
    pub(crate) fn config(&self) -> &SchedulingQueueConfig {
        &self.config
    }

    /// Registers a queueing hint of `plugin` for `event`: when an item that `plugin` rejected
    /// sees a matching event, `hint` says whether the event may help. Hints run in
    /// registration order.
    #[must_use]
    pub(crate) fn hint<F>(mut self, event: ClusterEvent, plugin: PluginId, hint: F) -> Self
    where
        F: Fn(&QueuedItem<K, T>, &ClusterEvent, &EventPayload) -> Result<QueueingHint, HintError>
            + Send
            + Sync
            + 'static,
    {
        self.hooks.add_hint(event, plugin, Arc::new(hint));
        self
    }

    /// Registers a pre-enqueue gate: items it refuses (`false`) wait in unschedulable until
    /// one of `events` (or the leftover flush) lets the gates run again. Gates run in
    /// registration order, the one that refused an item last going first.
    #[must_use]
    pub(crate) fn gate<F>(
        mut self,
        plugin: PluginId,
        events: impl IntoIterator<Item = ClusterEvent>,
        gate: F,
    ) -> Self
    where
        F: Fn(&QueuedItem<K, T>) -> bool + Send + Sync + 'static,
    {
        self.hooks
            .add_gate(plugin, events.into_iter().collect(), Arc::new(gate));
        self
    }

    /// Whether any hint or gate could care about `event`; a move on any other event changes
    /// nothing and need not scan.
    pub(crate) fn is_of_interest(&self, event: &ClusterEvent) -> bool {
        self.hooks.is_of_interest(event)
    }
}

impl<K, T> SchedulingRules<K, T>
where
    K: Hash + Eq + Clone,
{
    /// A fresh item for `key`, or the queued one of `existing` refreshed: its data replaced,
    /// its timestamp set to `now`, its counters kept (an add of a queued key). Takes the next
    /// insertion number from `parked`.
    pub(crate) fn new_item(
        &self,
        parked: &mut Parked<K, T>,
        key: K,
        data: T,
        now: Instant,
    ) -> QueuedItem<K, T> {
        QueuedItem::new(key, data, now, parked.next_seq())
    }

    /// [`new_item`](Self::new_item) for a key that was queued: `existing` with `data` and a
    /// fresh timestamp and number.
    pub(crate) fn refresh_item(
        &self,
        parked: &mut Parked<K, T>,
        mut existing: QueuedItem<K, T>,
        data: T,
        now: Instant,
    ) -> QueuedItem<K, T> {
        existing.data = data;
        existing.set_timestamp(now);
        existing.seq = parked.next_seq();
        existing
    }

    /// Where an added or activated item goes: active, unless a gate refuses it.
    pub(crate) fn admit(&self, item: QueuedItem<K, T>, now: Instant) -> Placement<K, T> {
        self.prepare(item, Strategy::Immediately, now, true)
    }

    /// Runs the gates (if asked) and the backoff check: where `item` goes under `strategy`.
    pub(crate) fn prepare(
        &self,
        mut item: QueuedItem<K, T>,
        strategy: Strategy,
        now: Instant,
        run_gates: bool,
    ) -> Placement<K, T> {
        if strategy == Strategy::Skip || (run_gates && self.gate_in_place(&mut item)) {
            return Placement::Unschedulable(item);
        }
        self.place(item, strategy, now)
    }

    /// Asks the gates about `item` and records the answer in it; true if a gate refused.
    pub(crate) fn gate_in_place(&self, item: &mut QueuedItem<K, T>) -> bool {
        match self.hooks.gate(item) {
            Some(plugin) => {
                let marks = item.marks_mut();
                marks.gating = Some(plugin);
                marks.rejectors.push(plugin);
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

    /// Where an item let in under `strategy` (not `Skip`) goes: backoff while its backoff
    /// lasts, active otherwise.
    pub(crate) fn place(
        &self,
        item: QueuedItem<K, T>,
        strategy: Strategy,
        now: Instant,
    ) -> Placement<K, T> {
        if strategy == Strategy::AfterBackoff {
            let wait = self.config.backoff_duration(item.backoff_count());
            let expiry = backoff::expiry(item.timestamp, wait);
            if expiry > now {
                return Placement::Backoff(item, expiry);
            }
        }
        Placement::Active(item)
    }

    /// When the leftover flush takes `item`: the first instant at which it has been waiting
    /// strictly longer than the maximum, counted from its entry into unschedulable or, for a
    /// gated item, from the last time the flush asked its gates. `None` if that is beyond what
    /// an instant holds: never.
    ///
    /// The strict rule is kube-scheduler's (`flushUnschedulablePodsLeftover`); as an instant it
    /// is 1 ns past `since + max`, so a timer and the check agree on one value.
    pub(crate) fn leftover_deadline(&self, item: &QueuedItem<K, T>) -> Option<Instant> {
        let since = match item.info().gating {
            Some(_) => item.flushed_at().unwrap_or(item.timestamp),
            None => item.timestamp,
        };
        since
            .checked_add(self.config.max_in_unschedulable)
            .and_then(|t| t.checked_add(Duration::from_nanos(1)))
    }

    /// Sets [`Parked::next_leftover`] from the items there now.
    pub(crate) fn refresh_next_leftover(&self, parked: &mut Parked<K, T>) {
        parked.next_leftover = parked
            .unschedulable
            .items()
            .filter_map(|item| self.leftover_deadline(item))
            .min();
    }

    /// Whether an unschedulable item is past its leftover deadline at `now`.
    pub(crate) fn any_leftover_due(&self, parked: &Parked<K, T>, now: Instant) -> bool {
        let due = |item| self.leftover_deadline(item).is_some_and(|d| d <= now);
        parked.unschedulable.items().any(due)
    }
}

impl<K, T> std::fmt::Debug for SchedulingRules<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulingRules")
            .field("config", &self.config)
            .field("hooks", &self.hooks)
            .finish()
    }
}

// ===== impl Wake =====

impl std::ops::BitOrAssign for Wake {
    fn bitor_assign(&mut self, other: Wake) {
        self.pop |= other.pop;
        self.timer |= other.timer;
        self.flush |= other.flush;
    }
}

impl<K, T> Returned<K, T> {
    pub(crate) fn new(item: QueuedItem<K, T>, missed: Missed<K>) -> Self {
        Returned { item, missed }
    }

    pub(crate) fn into_parts(self) -> (QueuedItem<K, T>, Missed<K>) {
        (self.item, self.missed)
    }
}
