//! Reading a [`SchedulingQueue`]'s state: what each sub-queue holds, where a key is, what is
//! in flight, and the next timed move.

use std::hash::Hash;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;

use super::machine::{InFlightEntry, Pending, SubQueue};

use super::QueuedItem;
use super::queue::SchedulingQueue;
use super::state::lock;

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
        let s = &*self.shared;
        let main = lock(&s.main);
        let hot = lock(&s.hot);
        Pending {
            active: hot.active_keys().cloned().collect(),
            backoff: hot.backoff_keys().cloned().collect(),
            unschedulable: main.keys().cloned().collect(),
        }
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
        let s = &*self.shared;
        let main = lock(&s.main);
        let hot = lock(&s.hot);
        let parked = main.contains(key).then_some(SubQueue::Unschedulable);
        hot.where_is(key).or(parked)
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
        self.shared.next_deadline()
    }

    /// Whether `key` is in flight (popped, not yet done or handed back).
    pub fn is_in_flight(&self, key: &K) -> bool {
        lock(&self.shared.hot).is_in_flight(key)
    }

    /// The keys in flight, in arbitrary order.
    pub fn in_flight(&self) -> Vec<K> {
        lock(&self.shared.hot).in_flight_keys()
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
        lock(&self.shared.hot).in_flight_entries()
    }

    /// How many items are unschedulable (rejected or gated).
    pub fn num_unschedulable(&self) -> usize {
        lock(&self.shared.main).len()
    }

    /// How many items are queued in all three sub-queues.
    pub fn len(&self) -> usize {
        let main = lock(&self.shared.main);
        let hot = lock(&self.shared.hot);
        hot.active_len() + hot.backoff_len() + main.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
