//! [`Machine`]: the state machine behind a work queue ([`WorkState`]) or a priority queue
//! ([`PriorityState`]), and every rule in which the two queues differ.

use std::borrow::Cow;
use std::hash::Hash;

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, PriorityState, WorkState};

/// The bounds every queue key meets.
pub(crate) trait QueueKey: Hash + Eq + Clone + Send + Sync {}
impl<K: Hash + Eq + Clone + Send + Sync> QueueKey for K {}

/// The state machine of a queue. A work queue's adds carry no priority: it is given 0 and
/// hands out 0.
pub(crate) enum Machine<K> {
    /// FIFO: client-go's work queue.
    Work(WorkState<K>),
    /// Higher priority first: controller-runtime's priority queue.
    Priority(PriorityState<K>),
}

impl<K: QueueKey> Machine<K> {
    /// The queue's type name, for its `Debug`.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Machine::Work(_) => "WorkQueue",
            Machine::Priority(_) => "PriorityQueue",
        }
    }

    /// Whether adds carry a priority. A priority queue reads the clock for aging, labels its
    /// depth metric by priority, absorbs the delayed add of a key that will be handed out anyway
    /// and counts a retry only for a delay above zero (controller-runtime's rules); the work
    /// queue does none of these (client-go's).
    pub(crate) fn has_priorities(&self) -> bool {
        matches!(self, Machine::Priority(_))
    }

    /// Adds `key`; a borrowed key is cloned only if the machine keeps it.
    pub(crate) fn add(&mut self, key: Cow<'_, K>, p: i32, now: u64) -> AddOutcome<K> {
        match (self, key) {
            (Machine::Work(m), Cow::Owned(key)) => m.add(key),
            (Machine::Work(m), Cow::Borrowed(key)) => m.add_ref(key),
            (Machine::Priority(m), Cow::Owned(key)) => m.add(key, p, now),
            (Machine::Priority(m), Cow::Borrowed(key)) => m.add_ref(key, p, now),
        }
    }

    pub(crate) fn pop(&mut self) -> PopOutcome<(K, i32)> {
        match self {
            Machine::Work(m) => match m.pop() {
                PopOutcome::Item(key) => PopOutcome::Item((key, 0)),
                PopOutcome::Empty => PopOutcome::Empty,
                PopOutcome::ShutDown => PopOutcome::ShutDown,
            },
            Machine::Priority(m) => m.pop(),
        }
    }

    /// Ends the hand-out of `key`; whether it was queued again (added while processing).
    pub(crate) fn done(&mut self, key: &K, now: u64) -> bool {
        match self {
            Machine::Work(m) => matches!(m.done(key), DoneOutcome::Requeued(())),
            Machine::Priority(m) => matches!(m.done(key, now), DoneOutcome::Requeued(_)),
        }
    }

    /// Whether a delayed add of `key` is absorbed because the key will be handed out without
    /// it: ready, or re-added while processing (controller-runtime's rule; client-go's
    /// delaying queue always waits).
    pub(crate) fn absorbs_delayed(&self, key: &K) -> bool {
        match self {
            Machine::Work(_) => false,
            Machine::Priority(m) => m.is_dirty(key),
        }
    }

    pub(crate) fn shut_down(&mut self) -> bool {
        match self {
            Machine::Work(m) => m.shut_down(),
            Machine::Priority(m) => m.shut_down(),
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        match self {
            Machine::Work(m) => m.is_shut_down(),
            Machine::Priority(m) => m.is_shut_down(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Machine::Work(m) => m.len(),
            Machine::Priority(m) => m.len(),
        }
    }

    pub(crate) fn processing_len(&self) -> usize {
        match self {
            Machine::Work(m) => m.processing_len(),
            Machine::Priority(m) => m.processing_len(),
        }
    }

    pub(crate) fn is_idle(&self) -> bool {
        match self {
            Machine::Work(m) => m.is_idle(),
            Machine::Priority(m) => m.is_idle(),
        }
    }
}
