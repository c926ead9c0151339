//! [`Machine`]: the work queue's or the priority queue's state machine, as the handle drives it.

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, PriorityState, WorkState};

use super::QueueKey;

/// A queue's state machine, as the handle drives it. Every add carries a priority, which the
/// work queue's machine ignores (its keys are handed out at priority 0). `now` gives the
/// nanoseconds since the queue was built; only the priority queue's machine reads it (it ages
/// its keys).
pub(crate) enum Machine<K> {
    Work(WorkState<K>),
    Priority(PriorityState<K>),
}

impl<K: QueueKey> Machine<K> {
    /// The priority queue's machine, which differs from the work queue's in three more ways:
    /// - the depth metric carries a priority label;
    /// - a delayed add with a zero delay is not a retry (controller-runtime's priority queue
    ///   counts only delays above zero, client-go's delaying queue every `AddAfter`);
    /// - keys due at one instant with one priority are ordered by their add counter, which a
    ///   key's first delayed add and each raise of its priority set, and a deadline move keeps
    ///   (controller-runtime's priority queue); the work queue orders them by the delayed add
    ///   that set their deadline (client-go leaves such ties unordered).
    pub(super) fn has_priority(&self) -> bool {
        matches!(self, Machine::Priority(_))
    }

    pub(super) fn add(
        &mut self,
        key: K,
        priority: i32,
        now: impl FnOnce() -> u64,
    ) -> AddOutcome<K> {
        match self {
            Machine::Work(m) => m.add(key),
            Machine::Priority(m) => m.add(key, priority, now()),
        }
    }

    pub(super) fn pop(&mut self) -> PopOutcome<(K, i32)> {
        match self {
            Machine::Work(m) => match m.pop() {
                PopOutcome::Item(key) => PopOutcome::Item((key, 0)),
                PopOutcome::Empty => PopOutcome::Empty,
                PopOutcome::ShutDown => PopOutcome::ShutDown,
            },
            Machine::Priority(m) => m.pop(),
        }
    }

    /// Ends `key`'s hand-out; `true` if it was queued again (added while processing).
    pub(super) fn done(&mut self, key: &K, now: impl FnOnce() -> u64) -> bool {
        match self {
            Machine::Work(m) => matches!(m.done(key), DoneOutcome::Requeued(())),
            Machine::Priority(m) => matches!(m.done(key, now()), DoneOutcome::Requeued(_)),
        }
    }

    pub(super) fn shut_down(&mut self) -> bool {
        match self {
            Machine::Work(m) => m.shut_down(),
            Machine::Priority(m) => m.shut_down(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Machine::Work(m) => m.len(),
            Machine::Priority(m) => m.len(),
        }
    }

    pub(super) fn processing_len(&self) -> usize {
        match self {
            Machine::Work(m) => m.processing_len(),
            Machine::Priority(m) => m.processing_len(),
        }
    }

    /// Nothing queued, nothing processing.
    pub(super) fn is_idle(&self) -> bool {
        match self {
            Machine::Work(m) => m.is_idle(),
            Machine::Priority(m) => m.is_idle(),
        }
    }

    /// Whether a delayed add of `key` is absorbed because the key will be handed out without
    /// it: ready, or re-added while processing (the priority queue's rule, controller-runtime's;
    /// the work queue always waits, as client-go's delaying queue).
    pub(super) fn absorbs_delayed(&self, key: &K) -> bool {
        match self {
            Machine::Work(_) => false,
            Machine::Priority(m) => m.is_dirty(key),
        }
    }
}
