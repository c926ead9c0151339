//! [`Popped`]: an item handed out by `pop`, in flight until it is done or handed back.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::QueuedItem;
use super::machine::Flight;
use super::shared::{Shared, TaskKey, TaskOrder};

/// An item popped from a [`SchedulingQueue`]: a guard that keeps its key in flight until the
/// attempt has a verdict.
///
/// It derefs to the [`QueuedItem`] (key, data, counters; `set_rejectors` and `set_pending`
/// through `DerefMut`). Finish the attempt one of two ways:
///
/// | verdict | call | the key |
/// |---|---|---|
/// | success | [`done`](Self::done) | leaves the queue; the item is handed back to the caller |
/// | failure | [`add_unschedulable_if_not_present`] | backoff, unschedulable or active, as the hints say |
///
/// Dropping it without a verdict (an early return, a `?`, a panic in the scheduler) counts as a
/// failure with an error: its rejector and pending sets are cleared and it goes back to the
/// queue exactly as if handed back with none, so it waits out its error backoff and is then
/// tried again. A key is never lost this way, and never wedged in flight (a key in flight is
/// never popped again, and a copy added meanwhile is discarded). If the key was queued again
/// meanwhile, the queued copy stays and the dropped one is discarded. If its flight already
/// ended (the queue's [`done`] of its key, or a shutdown), dropping it does nothing.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig, SubQueue};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("a", 1).unwrap();
/// let item = queue.pop().await.unwrap();
/// assert_eq!((*item.key(), item.attempts()), ("a", 1));
/// drop(item); // no verdict: a failure with an error
/// assert!(!queue.is_in_flight(&"a"));
/// assert_eq!(queue.where_is(&"a"), Some(SubQueue::Backoff));
///
/// let item = queue.pop().await.unwrap(); // after its 1 s error backoff
/// assert_eq!(item.consecutive_errors(), 1);
/// let (key, data) = item.done().into_parts();
/// assert_eq!((key, data), ("a", 1));
/// # }
/// ```
///
/// [`SchedulingQueue`]: super::SchedulingQueue
/// [`add_unschedulable_if_not_present`]: super::SchedulingQueue::add_unschedulable_if_not_present
/// [`done`]: super::SchedulingQueue::done
pub struct Popped<K, T> {
    /// `Some` until `done`, a hand-back or the drop takes it.
    item: Option<QueuedItem<K, T>>,
    /// The flight's id in its queue's in-flight record.
    flight: u64,
    /// The scheduling cycle it was popped in.
    cycle: u64,
    queue: Arc<dyn Flights<K, T>>,
}

/// What a guard needs from its queue, with the queue's order erased from the guard's type.
pub(crate) trait Flights<K, T>: Send + Sync {
    /// Ends `flight` of `key` as a success (nothing if it is not the key's current flight).
    fn end(&self, key: &K, flight: u64);
    /// Hands back an item dropped without a verdict, as a failure with an error.
    fn abandon(&self, item: QueuedItem<K, T>, flight: u64, cycle: u64);
}

// ===== impl Popped =====

impl<K, T> Popped<K, T> {
    pub(crate) fn new(queue: Arc<dyn Flights<K, T>>, flight: Flight<K, T>) -> Self {
        Popped {
            item: Some(flight.item),
            flight: flight.id,
            cycle: flight.cycle,
            queue,
        }
    }

    /// The scheduling cycle the item was popped in (the queue's
    /// [`scheduling_cycle`](super::SchedulingQueue::scheduling_cycle) right after the pop).
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    /// Ends the flight after a successful attempt and gives the item back (its key and data,
    /// with [`QueuedItem::into_parts`]). The queue holds no copy of it any more.
    pub fn done(mut self) -> QueuedItem<K, T> {
        let item = self.take();
        self.queue.end(item.key(), self.flight);
        item
    }

    /// The item and its flight, disarming the guard, for a hand-back to `shared`; the flight
    /// is `None` (and ends in its own queue) if the item was popped from another queue.
    pub(crate) fn disarm<C>(
        mut self,
        shared: &Arc<Shared<K, T, C>>,
    ) -> (QueuedItem<K, T>, Option<u64>)
    where
        K: TaskKey,
        T: Send + 'static,
        C: TaskOrder<K, T>,
    {
        let item = self.take();
        let ours = std::ptr::addr_eq(Arc::as_ptr(&self.queue), Arc::as_ptr(shared));
        if ours {
            (item, Some(self.flight))
        } else {
            self.queue.end(item.key(), self.flight);
            (item, None)
        }
    }

    fn take(&mut self) -> QueuedItem<K, T> {
        self.item
            .take()
            .expect("only a consuming method or the drop takes the item")
    }
}

impl<K, T> Deref for Popped<K, T> {
    type Target = QueuedItem<K, T>;

    fn deref(&self) -> &QueuedItem<K, T> {
        self.item
            .as_ref()
            .expect("the item is there until the guard is consumed")
    }
}

impl<K, T> DerefMut for Popped<K, T> {
    fn deref_mut(&mut self) -> &mut QueuedItem<K, T> {
        self.item
            .as_mut()
            .expect("the item is there until the guard is consumed")
    }
}

impl<K, T> Drop for Popped<K, T> {
    fn drop(&mut self) {
        if let Some(mut item) = self.item.take() {
            // No verdict: a failure with an error, whatever the previous attempt's sets said.
            item.set_rejectors([]);
            item.set_pending([]);
            self.queue.abandon(item, self.flight, self.cycle);
        }
    }
}

impl<K: fmt::Debug, T: fmt::Debug> fmt::Debug for Popped<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Popped")
            .field("item", &self.item)
            .field("cycle", &self.cycle)
            .finish_non_exhaustive()
    }
}

// ===== impl Flights for Shared =====

impl<K: TaskKey, T: Send + 'static, C: TaskOrder<K, T>> Flights<K, T> for Shared<K, T, C> {
    fn end(&self, key: &K, flight: u64) {
        let in_flight = &mut self.lock().machine.in_flight;
        if in_flight.is_current(key, flight) {
            in_flight.done(key);
        }
    }

    fn abandon(&self, item: QueuedItem<K, T>, flight: u64, cycle: u64) {
        tracing::debug!("a popped item was dropped without a verdict: handed back as an error");
        // A copy queued meanwhile wins (an `Err`): dropping this one loses no key; one whose
        // flight already ended is not queued again.
        let now = self.clock.now();
        let mut locked = self.change();
        let _ = locked
            .machine
            .hand_back(item, Some(flight), cycle, now, true);
    }
}
