//! [`SchedulingQueueBuilder`]: hints, gates and the active order of a new queue.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use ctrlq_queue_core::Compare;

use super::QueuedItem;
use super::machine::{
    ClusterEvent, ConfigError, EventPayload, HintError, Hooks, PluginId, PriorityOrder,
    QueueingHint, SchedulingQueueConfig, SchedulingState,
};
use super::queue::SchedulingQueue;
use super::shared::Shared;

/// Builds a [`SchedulingQueue`] with hints, gates and an ordering.
///
/// # Examples
///
/// ```
/// use std::cmp::Ordering;
/// use ctrlq_queue_async::scheduling::{QueuedItem, SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Shortest name first.
/// let queue = SchedulingQueue::<String, ()>::builder(SchedulingQueueConfig::default())
///     .order(|a: &QueuedItem<String, ()>, b: &QueuedItem<String, ()>| -> Ordering {
///         a.key().len().cmp(&b.key().len())
///     })
///     .build()
///     .unwrap();
/// queue.add("ccc".to_owned(), ()).unwrap();
/// queue.add("a".to_owned(), ()).unwrap();
/// assert_eq!(queue.pop().await.unwrap().key(), "a");
/// # }
/// ```
pub struct SchedulingQueueBuilder<K, T, C = PriorityOrder> {
    config: SchedulingQueueConfig,
    hooks: Hooks<K, T>,
    order: C,
}

// ===== the constructors of SchedulingQueue =====

impl<K, T> SchedulingQueue<K, T, PriorityOrder>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: super::Priority + Send + 'static,
{
    /// A queue with the default order, no hints and no gates.
    ///
    /// Needs no runtime: the timer task starts when the queue first needs it (see
    /// [`SchedulingQueue`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// assert!(queue.pending().active.is_empty());
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent:
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_queue_async::scheduling::{ConfigError, SchedulingQueue, SchedulingQueueConfig};
    ///
    /// let config = SchedulingQueueConfig::default().max_in_unschedulable(Duration::ZERO);
    /// let refused = SchedulingQueue::<&str, i64>::new(config).unwrap_err();
    /// assert_eq!(refused, ConfigError::ZeroMaxInUnschedulable);
    /// ```
    pub fn new(config: SchedulingQueueConfig) -> Result<Self, ConfigError> {
        Self::builder(config).build()
    }
}

impl<K, T> SchedulingQueue<K, T, PriorityOrder> {
    /// A builder for hints, gates and a custom order (see [`SchedulingQueueBuilder`]).
    pub fn builder(config: SchedulingQueueConfig) -> SchedulingQueueBuilder<K, T, PriorityOrder> {
        SchedulingQueueBuilder {
            config,
            hooks: Hooks::new(),
            order: PriorityOrder,
        }
    }
}

// ===== impl SchedulingQueueBuilder =====

impl<K, T, C> SchedulingQueueBuilder<K, T, C> {
    /// Registers a queueing hint of `plugin` for `event`: when an item that `plugin` rejected
    /// sees a matching event, `hint` says whether the event may help. Hints run in
    /// registration order; they must not call back into the queue. The hint receives the
    /// payload the caller gave with the event ([`move_all_with`]), empty for events without one.
    ///
    /// [`move_all_with`]: super::SchedulingQueue::move_all_with
    #[must_use]
    pub fn hint<F>(mut self, event: ClusterEvent, plugin: PluginId, hint: F) -> Self
    where
        F: Fn(&QueuedItem<K, T>, &ClusterEvent, &EventPayload) -> Result<QueueingHint, HintError>
            + Send
            + Sync
            + 'static,
    {
        // The state machine counts a failed hint as `Queue`; the log says why an item moved.
        let logged = move |item: &_, event: &ClusterEvent, payload: &_| {
            let answer = hint(item, event, payload);
            if let Err(error) = &answer {
                tracing::debug!(plugin, event = event.label, %error, "hint failed; treated as queue");
            }
            answer
        };
        self.hooks.hints.push((event, plugin, Arc::new(logged)));
        self
    }

    /// Registers a pre-enqueue gate: items it refuses (`false`) wait in unschedulable until
    /// one of `events` (or the leftover flush) lets the gates run again. Gates run in
    /// registration order, the one that refused an item last going first; they must not call
    /// back into the queue.
    #[must_use]
    pub fn gate<F>(
        mut self,
        plugin: PluginId,
        events: impl IntoIterator<Item = ClusterEvent>,
        gate: F,
    ) -> Self
    where
        F: Fn(&QueuedItem<K, T>) -> bool + Send + Sync + 'static,
    {
        let events = events.into_iter().collect();
        self.hooks.gates.push((plugin, events, Arc::new(gate)));
        self
    }

    /// Orders the active sub-queue with `order` (`Less` pops first) instead of
    /// [`PriorityOrder`]. Equal items pop in queueing order.
    ///
    /// `order` must be a strict weak order; one that is not yields a wrong order (debug builds
    /// assert antisymmetry) but never a corrupt queue.
    pub fn order<C2>(self, order: C2) -> SchedulingQueueBuilder<K, T, C2> {
        SchedulingQueueBuilder {
            config: self.config,
            hooks: self.hooks,
            order,
        }
    }

    /// Builds the queue. It needs no runtime: its timer task starts on the first item that goes
    /// to backoff or unschedulable (see [`SchedulingQueue`]).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when the settings are inconsistent (see its variants).
    pub fn build(self) -> Result<SchedulingQueue<K, T, C>, ConfigError>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        T: Send + 'static,
        C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
    {
        let machine = SchedulingState::new(self.config, self.hooks, self.order)?;
        let shared = Arc::new_cyclic(|me| Shared::new(machine, me.clone()));
        Ok(SchedulingQueue { shared })
    }
}

impl<K, T, C> fmt::Debug for SchedulingQueueBuilder<K, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulingQueueBuilder")
            .field("config", &self.config)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}
