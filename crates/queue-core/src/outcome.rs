//! What a transition of a queue's state machine did: one vocabulary for [`WorkState`] and
//! [`PriorityState`], so the async layer above handles both with one match.
//!
//! A variant that only one state returns says which in its doc.
//!
//! [`WorkState`]: crate::WorkState
//! [`PriorityState`]: crate::PriorityState

/// What an add did, in [`WorkState::add`] and [`PriorityState::add`].
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{AddOutcome, PriorityState, WorkState};
///
/// let mut work = WorkState::new();
/// assert_eq!(work.add("a"), AddOutcome::Queued);
/// assert_eq!(work.add("a"), AddOutcome::Coalesced);
///
/// let mut priority = PriorityState::new(None);
/// assert_eq!(priority.add("a", 0, 0), AddOutcome::Queued);
/// assert_eq!(priority.add("a", 5, 0), AddOutcome::Raised { from: 0 });
/// ```
///
/// [`WorkState::add`]: crate::WorkState::add
/// [`PriorityState::add`]: crate::PriorityState::add
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddOutcome<K> {
    /// The key is now queued (ready): one waiting getter can be woken. Both states.
    Queued,
    /// The key was dirty (ready, or re-added while processing) at a lower priority: it now has
    /// the added one, and goes behind the keys that rank as it does (without aging: to the
    /// back of its new priority). It keeps its age. [`PriorityState`] only.
    ///
    /// [`PriorityState`]: crate::PriorityState
    Raised {
        /// The priority it had.
        from: i32,
    },
    /// Nothing changed. [`WorkState`]: the key was already queued, or already marked to run
    /// again after `done`. [`PriorityState`]: the key was ready at this or a higher priority.
    ///
    /// [`WorkState`]: crate::WorkState
    /// [`PriorityState`]: crate::PriorityState
    Coalesced,
    /// The key is being processed: it is queued again when `done` is called for it (by the
    /// [`PriorityState`], at the highest priority it was added with meanwhile). Both states.
    ///
    /// [`PriorityState`]: crate::PriorityState
    Deferred {
        /// `true` if this add made the key dirty (it was not re-added since it was handed
        /// out). The [`WorkState`] returns `Deferred` only for such an add (a later one is
        /// [`Coalesced`](AddOutcome::Coalesced)); the [`PriorityState`] returns it with `false`
        /// for a later add that does not raise the key.
        ///
        /// [`WorkState`]: crate::WorkState
        /// [`PriorityState`]: crate::PriorityState
        newly_dirty: bool,
    },
    /// The state is shut down: the key is handed back and nothing changed. Both states.
    ShutDown(K),
}

/// What a pop found, in [`WorkState::pop`] (the key) and [`PriorityState::pop`] (the key and
/// its priority).
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{PopOutcome, WorkState};
///
/// let mut state = WorkState::new();
/// assert_eq!(state.pop(), PopOutcome::<&str>::Empty);
/// state.add("a");
/// state.shut_down();
/// assert_eq!(state.pop(), PopOutcome::Item("a"));
/// assert_eq!(state.pop(), PopOutcome::ShutDown);
/// ```
///
/// [`WorkState::pop`]: crate::WorkState::pop
/// [`PriorityState::pop`]: crate::PriorityState::pop
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopOutcome<K> {
    /// The first queued key, now being processed: call `done` for it when finished.
    Item(K),
    /// Nothing is queued and the queue is open: wait for an add.
    Empty,
    /// The queue is shut down and nothing is queued: no key will come any more.
    ShutDown,
}

/// What a done did, in [`WorkState::done`] and [`PriorityState::done`].
///
/// `P` is what the state queues a key with besides the key, as in the [`PopOutcome`] of each:
/// nothing (`()`, the work state) or its priority (`i32`, the priority state).
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{DoneOutcome, PriorityState, WorkState};
///
/// let mut work = WorkState::new();
/// work.add("a");
/// work.pop();
/// work.add("a");
/// assert_eq!(work.done("a"), DoneOutcome::Requeued(()));
/// assert_eq!(work.done("b"), DoneOutcome::NotProcessing);
///
/// let mut priority = PriorityState::new(None);
/// priority.add("a", 0, 0);
/// priority.pop();
/// priority.add("a", 3, 0);
/// assert_eq!(priority.done(&"a", 0), DoneOutcome::Requeued(3));
/// ```
///
/// [`WorkState::done`]: crate::WorkState::done
/// [`PriorityState::done`]: crate::PriorityState::done
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneOutcome<P = ()> {
    /// The key is no longer being processed.
    Finished,
    /// The key had been added while it was processed: it is queued again (wake one getter),
    /// with this payload (by the priority state, at this priority).
    Requeued(P),
    /// Ignored: the key was not being processed. No queue entry is created.
    NotProcessing,
}
