//! Moving queued items between sub-queues: on cluster events (through the hints), on
//! `activate`, and at the backoff and leftover deadlines.

use std::hash::Hash;
use std::sync::atomic::Ordering as AtomicOrdering;

use ctrlq_queue_core::Compare;
use tokio::time::Instant;

use super::machine::{ClusterEvent, EventPayload, Wake};

use super::QueuedItem;
use super::queue::SchedulingQueue;
use super::state::lock;

impl<K, T, C> SchedulingQueue<K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    /// Moves `keys` from backoff or unschedulable to active at once (gates still apply to
    /// unschedulable ones). A key in flight gets a `FORCE_ACTIVATE` event targeted at it, so it
    /// goes back to active if it fails. Unknown keys are ignored. Returns how many moved.
    pub fn activate(&self, keys: impl IntoIterator<Item = K>) -> usize {
        let s = &*self.shared;
        let now = s.clock.now();
        let mut main = lock(&s.main);
        let mut hot = lock(&s.hot);
        let mut wake = Wake::default();
        let cycle = s.cycle.load(AtomicOrdering::Acquire);
        let mut moved = 0;
        for key in keys {
            let activated = s
                .rules
                .activate(&mut main, &mut hot, key, cycle, now, &mut wake);
            moved += usize::from(activated);
        }
        drop(hot);
        drop(main);
        s.wake(wake);
        moved
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
        mut pre_check: impl FnMut(&QueuedItem<K, T>) -> bool,
    ) -> usize {
        let s = &*self.shared;
        if !s.rules.is_of_interest(event) {
            tracing::trace!(event = event.label, "event of no interest dropped");
            return 0;
        }
        let now = s.clock.now();
        let mut main = lock(&s.main);
        main.request_move(s.cycle.load(AtomicOrdering::Acquire));
        s.move_with(&mut main, event, &payload, now, |main, sink| {
            s.rules
                .move_matching(main, event, &payload, now, &mut pre_check, sink)
        })
    }

    /// Moves every backoff item whose expiry is at or before `now` to active; returns how
    /// many. The background task calls this at each exact expiry; tests may call it directly.
    pub fn flush_backoff_completed(&self, now: Instant) -> usize {
        self.shared.flush_backoff_completed(now)
    }

    /// Moves unschedulable items queued more than the configured maximum before `now`
    /// (strictly) to backoff or active; gated ones are re-checked by their gates, at most once
    /// per maximum. Returns how many moved. The background task calls this at each item's
    /// deadline; tests may call it directly.
    pub fn flush_unschedulable_leftover(&self, now: Instant) -> usize {
        self.shared.flush_unschedulable_leftover(now)
    }
}
