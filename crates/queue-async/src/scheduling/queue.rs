//! [`SchedulingQueue`]: the handle, its adds, pops and dones, shutdown, the moves on events
//! and at deadlines, and reading the queue's state. Each takes the queue's lock and makes one
//! step of the state machine (see `shared`).

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;

use super::QueuedItem;
use super::error::AlreadyQueuedError;
use super::machine::{ClusterEvent, EventPayload, InFlightEntry, Pending, PriorityOrder, SubQueue};
use super::pop::Pop;
use super::popped::Popped;
use super::shared::Shared;
use crate::AddError;
use crate::wait::{Wait, WaitOn};

/// A scheduler's queue: pops the most important pending item, and decides on each failure
/// whether the item retries after a backoff, waits for an event that could help, or goes
/// straight back (kube-scheduler's scheduling queue, for any keyed item).
///
/// Three sub-queues hold every queued item, each in exactly one: *active* (a heap in the
/// caller's order; by default higher [`Priority`] first, then earlier timestamp), *backoff*
/// (a heap by backoff expiry) and *unschedulable* (rejected or gated items waiting for an
/// event). Popped items are *in flight* until [`Popped::done`] or
/// [`add_unschedulable_if_not_present`]; the events seen meanwhile are replayed through the
/// hints when the item fails. A popped item is a guard: dropped without either, it goes back
/// as a failure with an error (see [`Popped`]), so no key is lost or wedged in flight.
///
/// Compared with the original: backoff-completed items move to active at their exact expiry
/// (not at a 1 s poll), and items unschedulable for too long at their own deadline (not at a
/// 30 s sweep; see [`SchedulingQueueConfig`]), so the background task has one timer, set to
/// the next deadline, and none while nothing waits; ties are FIFO and hints run in
/// registration order, so runs are deterministic; gated items get the leftover flush as a
/// failsafe. As in the original, one lock guards the whole queue, so a `pop` waits while a
/// move scans the unschedulable items.
///
/// The handle is a cheap `Clone`. A background task runs the timed moves; it ends on
/// [`shut_down`] and when the last handle drops. The queue can be built anywhere, inside a
/// runtime or not, and is bound to the runtime it was built in, or else to the first one a
/// call of it runs in (see the crate's [Time](crate#time)). The task starts on that runtime
/// when the first item goes to backoff or unschedulable; with no runtime bound yet and none on
/// the calling thread, at the first `pop` that has to wait. If that runtime shuts down while
/// the queue lives on, nothing moves an item at its deadline any more (see the crate's
/// [Time](crate#time)).
///
/// Timestamps (an item's queueing time, hence its backoff expiry) come from tokio's clock: the
/// calling task's runtime clock, or, from a plain thread outside any runtime, the clock of the
/// queue's runtime. So under paused time, a call from a helper thread is timed by the paused
/// clock, not the real one.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_async::scheduling::{
///     ActionType, ClusterEvent, QueueingHint, SchedulingQueue, SchedulingQueueConfig, SubQueue,
/// };
///
/// const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::builder(SchedulingQueueConfig::default())
///     // Only a new node can help an item that did not fit.
///     .hint(NODE_ADD, "Fit", |_item, _event, _payload| Ok(QueueingHint::Queue))
///     .build()
///     .unwrap();
///
/// queue.add("pod-a", 10).unwrap();
/// let mut item = queue.pop().await.unwrap();
/// item.set_rejectors(["Fit"]); // the attempt failed
/// queue.add_unschedulable_if_not_present(item, queue.scheduling_cycle()).unwrap();
/// assert_eq!(queue.where_is(&"pod-a"), Some(SubQueue::Unschedulable));
///
/// queue.move_all(&NODE_ADD); // backoff (1 s) not over yet
/// assert_eq!(queue.where_is(&"pod-a"), Some(SubQueue::Backoff));
/// // The timer task moves it at its expiry (1 s); sleep 1 ms longer so it has run.
/// tokio::time::sleep(Duration::from_millis(1001)).await;
/// assert_eq!(queue.where_is(&"pod-a"), Some(SubQueue::Active));
/// # }
/// ```
///
/// [`Priority`]: super::Priority
/// [`SchedulingQueueConfig`]: super::SchedulingQueueConfig
/// [`done`]: SchedulingQueue::done
/// [`add_unschedulable_if_not_present`]: SchedulingQueue::add_unschedulable_if_not_present
/// [`shut_down`]: SchedulingQueue::shut_down
pub struct SchedulingQueue<K, T, C = PriorityOrder> {
    pub(super) shared: Arc<Shared<K, T, C>>,
}

// ===== impl SchedulingQueue =====

impl<K, T, C> SchedulingQueue<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    /// Queues an item: to active, unless a gate refuses it (then to unschedulable).
    ///
    /// Adding a key that is already queued replaces its data, refreshes its timestamp, keeps
    /// its counters and moves it to active (as the original's `Add` does). Adding a key that
    /// is in flight queues a second copy, which `pop` discards while the first is in flight.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key and data if the queue is shutting down.
    pub fn add(&self, key: K, data: T) -> Result<(), AddError<(K, T)>> {
        let now = self.shared.clock.now();
        let added = self.shared.change().machine.add(key, data, now);
        added.map_err(AddError::ShutDown)
    }

    /// Waits for the most important item and hands it out: the head of active, or (with the
    /// pop-from-backoff option) the rejected item in backoff whose backoff ends first when
    /// active is empty. An item that failed with an error is never popped before its backoff
    /// ends. Returns `None` once shut down.
    ///
    /// Every pop increments the scheduling cycle and the item's attempts, and marks the item
    /// in flight until [`done`](Self::done) or a requeue. A stale copy of a key that is in
    /// flight is discarded.
    ///
    /// Equivalent to `async fn pop(&self) -> Option<Popped<K, T>>`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future never loses an item.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// queue.add("low", 1).unwrap();
    /// queue.add("high", 9).unwrap();
    /// let item = queue.pop().await.unwrap();
    /// assert_eq!((*item.key(), queue.scheduling_cycle()), ("high", 1));
    /// queue.done(item.key());
    /// # }
    /// ```
    pub fn pop(&self) -> Pop<'_, K, T, C> {
        let shared = &self.shared;
        Pop {
            shared,
            wait: Wait::new(shared),
        }
    }

    /// [`pop`](Self::pop) without waiting: `None` if nothing can be popped now or if shut down.
    pub fn try_pop(&self) -> Option<Popped<K, T>> {
        let flight = self.shared.try_take().flatten()?;
        Some(Popped::new(self.shared.clone(), flight))
    }

    /// Hands back an item whose attempt failed, popped in scheduling cycle `cycle`.
    ///
    /// Ends the item's flight (as [`Popped::done`]) if it is still in flight. An attempt with rejectors or
    /// pending plugins counts as unschedulable (and resets the error count); one with neither
    /// counts as an error. The timestamp is refreshed. Then the events seen during the flight
    /// are replayed through the hints: the strongest answer decides between unschedulable,
    /// backoff (or active if the backoff is already over) and active. An item that was not in
    /// flight (its flight ended by [`done`](Self::done) of its key, or it was popped from
    /// another queue) goes to backoff if a move was requested in or after `cycle`, else to
    /// unschedulable. An error always goes to backoff, and waits it out: pop-from-backoff never
    /// takes it early.
    ///
    /// The caller sets [`set_rejectors`](QueuedItem::set_rejectors) and
    /// [`set_pending`](QueuedItem::set_pending) for each attempt: a popped item keeps the
    /// previous attempt's sets.
    ///
    /// # Errors
    ///
    /// [`AlreadyQueuedError`] with the item, changing nothing else, if its key is queued.
    pub fn add_unschedulable_if_not_present(
        &self,
        item: Popped<K, T>,
        cycle: u64,
    ) -> Result<(), AlreadyQueuedError<K, T>> {
        let (item, flight) = item.disarm(&self.shared);
        let now = self.shared.clock.now();
        let mut locked = self.shared.change();
        let back = locked.machine.hand_back(item, flight, cycle, now, false);
        back.map_err(AlreadyQueuedError)
    }

    /// Ends the flight of `key` after a successful attempt; prunes the in-flight events nobody
    /// can replay any more. A key that is not in flight is ignored.
    ///
    /// [`Popped::done`] does the same from the guard; after this call, the guard of that
    /// flight does nothing when dropped (and a hand-back treats its item as not in flight).
    pub fn done(&self, key: &K) {
        self.shared.lock().machine.in_flight.done(key);
    }

    /// Replaces the data of `key`, with the `events` the change amounts to.
    ///
    /// In flight: the events are recorded for it (it is judged when it comes back) and the
    /// data is handed back, since the queue holds no copy. In active or backoff: the data is
    /// replaced in place (re-ordered). In unschedulable: the data is replaced and the events
    /// are judged like [`move_all`](Self::move_all)'s, targeted at this item. Not queued: added
    /// as new; after shutdown that add is refused and the data is handed back.
    pub fn update(&self, key: K, data: T, events: &[ClusterEvent]) -> Option<T> {
        let now = self.shared.clock.now();
        self.shared.change().machine.update(key, data, events, now)
    }

    /// Removes `key` from whichever sub-queue holds it and returns its data. Does not touch
    /// the in-flight record (`done` does).
    pub fn delete(&self, key: &K) -> Option<T> {
        self.shared.lock().machine.take(key).map(|item| item.data)
    }

    // ===== moving items =====

    /// Moves `keys` from backoff or unschedulable to active at once (gates still apply to
    /// unschedulable ones). A key in flight gets a `FORCE_ACTIVATE` event targeted at it, so it
    /// goes back to active if it fails. Unknown keys are ignored. Returns how many moved.
    pub fn activate(&self, keys: impl IntoIterator<Item = K>) -> usize {
        let now = self.shared.clock.now();
        self.shared.change().machine.activate(keys, now)
    }

    /// [`move_matching`](Self::move_matching) with every unschedulable item as a candidate.
    pub fn move_all(&self, event: &ClusterEvent) -> usize {
        self.move_matching(event, |_| true)
    }

    /// [`move_all`](Self::move_all) with the event's `payload` handed to the hints (see
    /// [`EventPayload`]).
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
    pub fn move_all_with(&self, event: &ClusterEvent, payload: EventPayload) -> usize {
        self.move_matching_with(event, payload, |_| true)
    }

    /// Tells the queue `event` happened: each unschedulable item that `pre_check` accepts and
    /// whose rejectors' hints answer `Queue` moves to backoff, or to active if its backoff is
    /// over (or a pending plugin answered). Returns how many moved.
    ///
    /// An event no hint or gate registered for is dropped at once: `pre_check` is not called
    /// and nothing is scanned or recorded. A wildcard moves every non-gated candidate without
    /// asking hints. A gated item moves only on an event its gate registered for, and only if
    /// the gates then let it in. The event is recorded for the items in flight.
    ///
    /// The hints get an empty payload; [`move_matching_with`](Self::move_matching_with) gives
    /// them one.
    pub fn move_matching(
        &self,
        event: &ClusterEvent,
        pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
    ) -> usize {
        self.move_matching_with(event, EventPayload::none(), pre_check)
    }

    /// [`move_matching`](Self::move_matching) with the event's `payload` handed to the hints:
    /// kube-scheduler's hints get the event's old and new objects; pass whatever yours need
    /// (see [`EventPayload`]). The payload is kept with the event for the items in flight, so
    /// their hints see it when they come back.
    pub fn move_matching_with(
        &self,
        event: &ClusterEvent,
        payload: EventPayload,
        pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
    ) -> usize {
        let now = self.shared.clock.now();
        let mut locked = self.shared.change();
        locked.machine.move_matching(event, payload, now, pre_check)
    }

    /// Moves every backoff item whose expiry is at or before `now` to active; returns how
    /// many. The background task calls this at each exact expiry; tests may call it directly.
    pub fn flush_backoff_completed(&self, now: Instant) -> usize {
        self.shared.change().machine.flush_backoff(Some(now), now)
    }

    /// Moves unschedulable items queued more than the configured maximum before `now`
    /// (strictly) to backoff or active; gated ones are re-checked by their gates, at most once
    /// per maximum. Returns how many moved. The background task calls this at each item's
    /// deadline; tests may call it directly.
    pub fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        self.shared
            .change()
            .machine
            .flush_unschedulable_leftover(now)
    }
}

impl<K, T, C> SchedulingQueue<K, T, C> {
    /// The scheduling cycle: how many items were popped so far.
    pub fn scheduling_cycle(&self) -> u64 {
        self.shared.lock().machine.cycle
    }

    /// Shuts the queue down: pending and future `pop`s return `None`, every flight ends, and the
    /// background task stops. Queued items stay (they can still be listed or deleted).
    pub fn shut_down(&self) {
        self.shared.shut_down();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.lock().machine.closed
    }
}

// ===== reading the state =====

impl<K, T, C> SchedulingQueue<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    /// The keys in each sub-queue, with the original's summary as `Display`.
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// queue.add("a", 1).unwrap();
    /// assert_eq!(queue.pending().to_string(), "activeQ:1; backoffQ:0; unschedulablePods:0");
    /// # }
    /// ```
    pub fn pending(&self) -> Pending<K> {
        self.shared.lock().machine.pending()
    }

    /// Which sub-queue holds `key`, if any.
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig, SubQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// queue.add("a", 1).unwrap();
    /// assert_eq!(queue.where_is(&"a"), Some(SubQueue::Active));
    /// # }
    /// ```
    pub fn where_is(&self, key: &K) -> Option<SubQueue> {
        self.shared.lock().machine.where_is(key)
    }

    /// When the queue next moves an item by itself: the earliest backoff expiry or
    /// unschedulable deadline (see [`SchedulingQueueConfig::max_in_unschedulable`]). `None`
    /// when nothing is timed: the queue then sets no timer, so under paused time the clock is
    /// free to jump as far as the caller's own timers take it. A deadline may be early (the
    /// item it was set for left since), never late.
    ///
    /// ```
    /// # use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue: SchedulingQueue<&str, i64> =
    ///     SchedulingQueue::builder(SchedulingQueueConfig::default()).build().unwrap();
    /// assert_eq!(queue.next_timed_move(), None);
    /// # }
    /// ```
    ///
    /// [`SchedulingQueueConfig::max_in_unschedulable`]: super::SchedulingQueueConfig::max_in_unschedulable
    pub fn next_timed_move(&self) -> Option<Instant> {
        self.shared.lock().machine.next_deadline()
    }

    /// Whether `key` is in flight (popped, not yet done or handed back).
    pub fn is_in_flight(&self, key: &K) -> bool {
        self.shared.lock().machine.in_flight.contains(key)
    }

    /// The keys in flight, in arbitrary order.
    pub fn in_flight(&self) -> Vec<K> {
        self.shared
            .lock()
            .machine
            .in_flight
            .markers
            .keys()
            .cloned()
            .collect()
    }

    /// The in-flight list: markers of items in flight and the events recorded after them, in
    /// order (for diagnostics and tests).
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{InFlightEntry, SchedulingQueue, SchedulingQueueConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// queue.add("a", 1).unwrap();
    /// let _item = queue.pop().await.unwrap();
    /// assert_eq!(queue.in_flight_events(), vec![InFlightEntry::Item("a")]);
    /// # }
    /// ```
    pub fn in_flight_events(&self) -> Vec<InFlightEntry<K>> {
        self.shared.lock().machine.in_flight.entries()
    }

    /// How many items are unschedulable (rejected or gated).
    pub fn num_unschedulable(&self) -> usize {
        self.shared.lock().machine.unschedulable.len()
    }

    /// How many items are queued in all three sub-queues.
    pub fn len(&self) -> usize {
        self.shared.lock().machine.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, T, C> Clone for SchedulingQueue<K, T, C> {
    fn clone(&self) -> Self {
        SchedulingQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<K, T, C> fmt::Debug for SchedulingQueue<K, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.lock().machine.describe("SchedulingQueue", f)
    }
}
