//! [`Core`]: what the handle needs from its state machine, implemented by the work queue's
//! ([`WorkState`]) and the priority queue's ([`PriorityState`]), both from `queue-core`.
//!
//! The handle is generic over the machine, so each queue's adds, gets and dones are compiled
//! for its own machine: no call on them chooses the machine at run time. Every add carries a
//! priority; the work queue's machine ignores it (its keys are handed out at priority 0).

use std::hash::Hash;

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, PriorityState, WorkState};

/// The bounds every queue key meets.
pub(crate) trait QueueKey: Hash + Eq + Clone + Send + Sync {}
impl<K: Hash + Eq + Clone + Send + Sync> QueueKey for K {}

/// A queue's state machine, as the handle drives it.
pub(crate) trait Core<K>: Send + 'static {
    /// Whether the machine reads `now` for adds and dones (priority aging).
    const NEEDS_TIME: bool;
    /// Whether a delayed add with a zero delay counts as a retry: client-go's delaying queue
    /// counts every `AddAfter`, controller-runtime's priority queue only delays above zero.
    const ZERO_DELAY_IS_RETRY: bool;
    /// How keys due at one instant with one priority are ordered. `true`: by their add
    /// counter, which a key's first delayed add and each raise of its priority set, and a
    /// deadline move keeps (controller-runtime's priority queue). `false`: by the delayed add
    /// that set their deadline (the work queue; client-go leaves such ties unordered).
    const TIES_BY_ADD_COUNTER: bool;
    /// Whether the depth metric carries a priority label.
    const HAS_PRIORITY: bool;

    /// An empty machine; `aging` (nanoseconds per priority step) is the priority queue's.
    fn new(aging: Option<u64>) -> Self;
    fn add(&mut self, key: K, priority: i32, now: u64) -> AddOutcome<K>;
    /// [`add`](Core::add) by reference, cloning the key only if the machine keeps it.
    fn add_ref(&mut self, key: &K, priority: i32, now: u64) -> AddOutcome<K>;
    fn pop(&mut self) -> PopOutcome<(K, i32)>;
    /// Ends `key`'s hand-out; `true` if it was queued again (added while processing).
    fn done(&mut self, key: &K, now: u64) -> bool;
    fn shut_down(&mut self) -> bool;
    fn is_shut_down(&self) -> bool;
    fn len(&self) -> usize;
    fn processing_len(&self) -> usize;
    /// Nothing queued, nothing processing.
    fn is_idle(&self) -> bool {
        self.len() == 0 && self.processing_len() == 0
    }
    /// Whether a delayed add of `key` is absorbed because the key will be handed out without
    /// it: ready, or re-added while processing (the priority queue's rule, controller-runtime's;
    /// the plain work queue always waits, as client-go's delaying queue).
    fn absorbs_delayed(&self, key: &K) -> bool;
}

impl<K: QueueKey + 'static> Core<K> for WorkState<K> {
    const NEEDS_TIME: bool = false;
    const ZERO_DELAY_IS_RETRY: bool = true;
    const TIES_BY_ADD_COUNTER: bool = false;
    const HAS_PRIORITY: bool = false;

    fn new(_aging: Option<u64>) -> Self {
        WorkState::new()
    }
    #[inline(always)]
    fn add(&mut self, key: K, _priority: i32, _now: u64) -> AddOutcome<K> {
        WorkState::add(self, key)
    }
    #[inline(always)]
    fn add_ref(&mut self, key: &K, _priority: i32, _now: u64) -> AddOutcome<K> {
        WorkState::add_ref(self, key)
    }
    #[inline(always)]
    fn pop(&mut self) -> PopOutcome<(K, i32)> {
        match WorkState::pop(self) {
            PopOutcome::Item(k) => PopOutcome::Item((k, 0)),
            PopOutcome::Empty => PopOutcome::Empty,
            PopOutcome::ShutDown => PopOutcome::ShutDown,
        }
    }
    #[inline(always)]
    fn done(&mut self, key: &K, _now: u64) -> bool {
        matches!(WorkState::done(self, key), DoneOutcome::Requeued(()))
    }
    fn shut_down(&mut self) -> bool {
        WorkState::shut_down(self)
    }
    fn is_shut_down(&self) -> bool {
        WorkState::is_shut_down(self)
    }
    fn len(&self) -> usize {
        WorkState::len(self)
    }
    fn processing_len(&self) -> usize {
        WorkState::processing_len(self)
    }
    fn absorbs_delayed(&self, _key: &K) -> bool {
        false
    }
}

impl<K: QueueKey + 'static> Core<K> for PriorityState<K> {
    const NEEDS_TIME: bool = true;
    const ZERO_DELAY_IS_RETRY: bool = false;
    const TIES_BY_ADD_COUNTER: bool = true;
    const HAS_PRIORITY: bool = true;

    fn new(aging: Option<u64>) -> Self {
        PriorityState::new(aging)
    }
    #[inline(always)]
    fn add(&mut self, key: K, priority: i32, now: u64) -> AddOutcome<K> {
        PriorityState::add(self, key, priority, now)
    }
    #[inline(always)]
    fn add_ref(&mut self, key: &K, priority: i32, now: u64) -> AddOutcome<K> {
        PriorityState::add_ref(self, key, priority, now)
    }
    #[inline(always)]
    fn pop(&mut self) -> PopOutcome<(K, i32)> {
        PriorityState::pop(self)
    }
    #[inline(always)]
    fn done(&mut self, key: &K, now: u64) -> bool {
        matches!(
            PriorityState::done(self, key, now),
            DoneOutcome::Requeued(_)
        )
    }
    fn shut_down(&mut self) -> bool {
        PriorityState::shut_down(self)
    }
    fn is_shut_down(&self) -> bool {
        PriorityState::is_shut_down(self)
    }
    fn len(&self) -> usize {
        PriorityState::len(self)
    }
    fn processing_len(&self) -> usize {
        PriorityState::processing_len(self)
    }
    fn absorbs_delayed(&self, key: &K) -> bool {
        self.is_dirty(key)
    }
}
