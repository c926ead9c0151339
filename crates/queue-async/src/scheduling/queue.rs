//! [`SchedulingQueue`]: the handle, its adds, pops and dones, and shutdown. Moving items on
//! events is in `moves`, reading the queue's state in `inspect`.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use ctrlq_queue_core::Compare;

use super::machine::{ClusterEvent, PriorityOrder};

use super::QueuedItem;
use super::error::AlreadyQueuedError;
use super::pop::Pop;
use super::popped::Popped;
use super::state::{LockedScheduling, lock};
use crate::AddError;

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
/// the next deadline, and none while nothing waits; `pop` never waits behind a scan of
/// unschedulable items; ties are FIFO and hints run in registration order, so runs are
/// deterministic; gated items get the leftover flush as a failsafe.
///
/// The handle is a cheap `Clone`. A background task runs the timed moves; it ends on
/// [`shut_down`] and when the last handle drops. The queue can be built anywhere, inside a
/// runtime or not, and is bound to the runtime it was built in, or else to the first one a
/// call of it runs in (see the crate's [Time](crate#time)). The task starts on that runtime
/// when the first item goes to backoff or unschedulable; with no runtime bound yet and none on
/// the calling thread, at the first `pop` that has to wait. If that runtime shuts down while
/// the queue lives on, backoff ends at once and unschedulable items past their leftover
/// deadline move at the next `pop` that looks: nothing waits for a timer that will not ring.
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
    pub(super) shared: Arc<LockedScheduling<K, T, C>>,
}

// ===== impl SchedulingQueue =====

impl<K, T, C> SchedulingQueue<K, T, C> {
    pub(crate) fn from_shared(shared: Arc<LockedScheduling<K, T, C>>) -> Self {
        SchedulingQueue { shared }
    }
}

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
        let s = &*self.shared;
        let now = s.clock.now();
        let mut main = lock(&s.main);
        if lock(&s.hot).is_closed() {
            return Err(AddError::ShutDown((key, data)));
        }
        let existing = s.rules.take(&mut main, &mut lock(&s.hot), &key);
        let item = match existing {
            Some(item) => s.rules.refresh_item(&mut main, item, data, now),
            None => s.rules.new_item(&mut main, key, data, now),
        };
        // The gates run under `main` alone.
        let placement = s.rules.admit(item, now);
        let wake = s.rules.commit(&mut main, &mut lock(&s.hot), placement, now);
        drop(main);
        s.wake(wake);
        Ok(())
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
        Pop::new(&self.shared)
    }

    /// [`pop`](Self::pop) without waiting: `None` if nothing can be popped now or if shut down.
    pub fn try_pop(&self) -> Option<Popped<K, T>> {
        let popped = self.shared.try_pop().flatten()?;
        Some(super::pop::guard(&self.shared, popped))
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
        self.shared.hand_back(item, flight, cycle, false)
    }

    /// Ends the flight of `key` after a successful attempt; prunes the in-flight events nobody
    /// can replay any more. A key that is not in flight is ignored.
    ///
    /// [`Popped::done`] does the same from the guard; after this call, the guard of that
    /// flight does nothing when dropped (and a hand-back treats its item as not in flight).
    pub fn done(&self, key: &K) {
        lock(&self.shared.hot).done(key);
    }

    /// Replaces the data of `key`, with the `events` the change amounts to.
    ///
    /// In flight: the events are recorded for it (it is judged when it comes back) and the
    /// data is handed back, since the queue holds no copy. In active or backoff: the data is
    /// replaced in place (re-ordered). In unschedulable: the data is replaced and the events
    /// are judged like [`move_all`](Self::move_all)'s, targeted at this item. Not queued: added
    /// as new; after shutdown that add is refused and the data is handed back.
    pub fn update(&self, key: K, data: T, events: &[ClusterEvent]) -> Option<T> {
        let s = &*self.shared;
        let now = s.clock.now();
        let mut main = lock(&s.main);
        let ready = s.rules.update_ready(&mut lock(&s.hot), key, data, events);
        let (key, data) = match ready {
            Ok(handed_back) => return handed_back,
            Err(rest) => rest,
        };
        // The hints and gates run under `main` alone.
        match s.rules.update_parked(&mut main, key, data, events, now) {
            Ok(placement) => {
                let wake = s.rules.commit(&mut main, &mut lock(&s.hot), placement, now);
                drop(main);
                s.wake(wake);
                None
            }
            Err((key, data)) => {
                drop(main);
                self.add(key, data)
                    .err()
                    .map(|refused| refused.into_key().1)
            }
        }
    }

    /// Removes `key` from whichever sub-queue holds it and returns its data. Does not touch
    /// the in-flight record (`done` does).
    pub fn delete(&self, key: &K) -> Option<T> {
        let s = &*self.shared;
        let mut main = lock(&s.main);
        let item = s.rules.take(&mut main, &mut lock(&s.hot), key);
        item.map(|item| item.into_parts().1)
    }
}

impl<K, T, C> SchedulingQueue<K, T, C> {
    /// The scheduling cycle: how many items were popped so far.
    pub fn scheduling_cycle(&self) -> u64 {
        self.shared.cycle.load(AtomicOrdering::Acquire)
    }

    /// Shuts the queue down: pending and future `pop`s return `None`, every flight ends, and the
    /// background task stops. Queued items stay (they can still be listed or deleted).
    pub fn shut_down(&self)
    where
        K: Hash + Eq + Clone,
        C: Compare<QueuedItem<K, T>>,
    {
        self.shared.shut_down();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shutting_down(&self) -> bool {
        lock(&self.shared.hot).is_closed()
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
        let s = &*self.shared;
        let main = lock(&s.main);
        let hot = lock(&s.hot);
        f.debug_struct("SchedulingQueue")
            .field("active", &hot.active_len())
            .field("backoff", &hot.backoff_len())
            .field("unschedulable", &main.len())
            .field("in_flight", &hot.in_flight_len())
            .field("shutting_down", &hot.is_closed())
            .finish()
    }
}
