//! The two state machines behind the work queues ([`WorkState`] and [`PriorityState`] from
//! `queue-core`) under one interface, chosen by what an add carries besides the key: nothing
//! (`()`, the work queue) or a priority (`i32`, the priority queue).
//!
//! The traits are `pub` in this private module (sealed): public types bound on [`Payload`], and
//! nobody outside the crate can name or implement them.

#![allow(unreachable_pub)]

use std::fmt;
use std::hash::Hash;

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, PriorityState, WorkState};

/// The bounds every queue key meets.
pub trait QueueKey: Hash + Eq + Clone + Send + Sync {}
impl<K: Hash + Eq + Clone + Send + Sync> QueueKey for K {}

/// What an add carries besides the key (`()` or a priority), and so which state machine the
/// queue runs. Sealed: the module is private, so only this crate names or implements it.
pub trait Payload: Copy + Ord + Default + Send + Sync + fmt::Debug + 'static {
    /// The name of a queue whose adds carry `Self` (in its `Debug`).
    const QUEUE_NAME: &'static str;
    /// The name of that queue's builder (in its `Debug`).
    const BUILDER_NAME: &'static str;
    /// The state machine of a queue whose adds carry `Self`.
    type Machine<K: QueueKey>: Machine<K, P = Self>;
    /// How keys due at one instant with one payload are ordered. `true`: by their add counter,
    /// which a key's first delayed add and each raise of its payload set, and a deadline move
    /// keeps (controller-runtime's priority queue). `false`: by the delayed add that set their
    /// deadline (the work queue; client-go leaves such ties unordered).
    const TIES_BY_ADD_COUNTER: bool;
}

impl Payload for () {
    const QUEUE_NAME: &'static str = "WorkQueue";
    const BUILDER_NAME: &'static str = "WorkQueueBuilder";
    type Machine<K: QueueKey> = WorkState<K>;
    const TIES_BY_ADD_COUNTER: bool = false;
}

impl Payload for i32 {
    const QUEUE_NAME: &'static str = "PriorityQueue";
    const BUILDER_NAME: &'static str = "PriorityQueueBuilder";
    type Machine<K: QueueKey> = PriorityState<K>;
    const TIES_BY_ADD_COUNTER: bool = true;
}

/// A key given to an add: owned (`K`), or borrowed (`&K`) and cloned only if the queue keeps
/// it.
pub trait AddKey<K>: Sized {
    /// The key.
    fn key(&self) -> &K;
    /// Hands the key to `machine`'s add of its form.
    fn add_to<M: Machine<K>>(self, machine: &mut M, p: M::P, now: u64) -> AddOutcome<K>;
}

impl<K: QueueKey> AddKey<K> for K {
    #[inline(always)]
    fn key(&self) -> &K {
        self
    }
    #[inline(always)]
    fn add_to<M: Machine<K>>(self, machine: &mut M, p: M::P, now: u64) -> AddOutcome<K> {
        machine.add(self, p, now)
    }
}

impl<K: QueueKey> AddKey<K> for &K {
    #[inline(always)]
    fn key(&self) -> &K {
        self
    }
    #[inline(always)]
    fn add_to<M: Machine<K>>(self, machine: &mut M, p: M::P, now: u64) -> AddOutcome<K> {
        machine.add_ref(self, p, now)
    }
}

/// A queue's state machine: `P` is what an add carries besides the key.
pub trait Machine<K>: Send {
    /// What an add carries besides the key.
    type P: Payload;
    /// Whether `now` must be read for adds and dones (priority aging).
    const NEEDS_TIME: bool;
    /// Whether a delayed add with a zero delay counts as a retry: client-go's delaying queue
    /// counts every `AddAfter`, controller-runtime's priority queue only delays above zero.
    const ZERO_DELAY_IS_RETRY: bool;
    /// An empty machine; `aging` (nanoseconds per priority step) is the priority queue's.
    fn new(aging: Option<u64>) -> Self;
    fn add(&mut self, key: K, p: Self::P, now: u64) -> AddOutcome<K>;
    /// [`add`](Machine::add) by reference, cloning the key only if the machine keeps it.
    fn add_ref(&mut self, key: &K, p: Self::P, now: u64) -> AddOutcome<K>;
    fn pop(&mut self) -> PopOutcome<(K, Self::P)>;
    fn done(&mut self, key: &K, now: u64) -> DoneOutcome<Self::P>;
    fn shut_down(&mut self) -> bool;
    fn is_shut_down(&self) -> bool;
    fn len(&self) -> usize;
    fn processing_len(&self) -> usize;
    fn is_idle(&self) -> bool;
    /// Whether a delayed add of `key` is absorbed because the key will be handed out without
    /// it: ready, or re-added while processing (the priority queue's rule, controller-runtime's;
    /// the plain work queue always waits, as client-go's delaying queue).
    fn absorbs_delayed(&self, key: &K) -> bool;
    /// The priority label of the depth metric, if the queue has priorities.
    fn metric_priority(p: Self::P) -> Option<i32>;
}

impl<K: QueueKey> Machine<K> for WorkState<K> {
    type P = ();
    const NEEDS_TIME: bool = false;
    const ZERO_DELAY_IS_RETRY: bool = true;
    fn new(_aging: Option<u64>) -> Self {
        WorkState::new()
    }
    #[inline(always)]
    fn add(&mut self, key: K, (): (), _now: u64) -> AddOutcome<K> {
        WorkState::add(self, key)
    }
    #[inline(always)]
    fn add_ref(&mut self, key: &K, (): (), _now: u64) -> AddOutcome<K> {
        WorkState::add_ref(self, key)
    }
    fn pop(&mut self) -> PopOutcome<(K, ())> {
        match WorkState::pop(self) {
            PopOutcome::Item(k) => PopOutcome::Item((k, ())),
            PopOutcome::Empty => PopOutcome::Empty,
            PopOutcome::ShutDown => PopOutcome::ShutDown,
        }
    }
    fn done(&mut self, key: &K, _now: u64) -> DoneOutcome {
        WorkState::done(self, key)
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
    fn is_idle(&self) -> bool {
        WorkState::is_idle(self)
    }
    fn absorbs_delayed(&self, _key: &K) -> bool {
        false
    }
    fn metric_priority((): ()) -> Option<i32> {
        None
    }
}

impl<K: QueueKey> Machine<K> for PriorityState<K> {
    type P = i32;
    const NEEDS_TIME: bool = true;
    const ZERO_DELAY_IS_RETRY: bool = false;
    fn new(aging: Option<u64>) -> Self {
        PriorityState::new(aging)
    }
    #[inline(always)]
    fn add(&mut self, key: K, p: i32, now: u64) -> AddOutcome<K> {
        PriorityState::add(self, key, p, now)
    }
    #[inline(always)]
    fn add_ref(&mut self, key: &K, p: i32, now: u64) -> AddOutcome<K> {
        PriorityState::add_ref(self, key, p, now)
    }
    fn pop(&mut self) -> PopOutcome<(K, i32)> {
        PriorityState::pop(self)
    }
    fn done(&mut self, key: &K, now: u64) -> DoneOutcome<i32> {
        PriorityState::done(self, key, now)
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
    fn is_idle(&self) -> bool {
        PriorityState::is_idle(self)
    }
    fn absorbs_delayed(&self, key: &K) -> bool {
        self.is_dirty(key)
    }
    fn metric_priority(p: i32) -> Option<i32> {
        Some(p)
    }
}
