//! The queued item: the caller's key and data plus the queue's bookkeeping.

use std::cmp::Ordering;

use tokio::time::Instant;

use ctrlq_queue_core::Compare;

/// An item of a [`SchedulingQueue`]: the caller's key and data, and the queue's bookkeeping,
/// timed by tokio's clock.
///
/// [`pop`] hands one out (inside a [`Popped`] guard); the caller tries it and, on failure,
/// records who rejected it ([`set_rejectors`], [`set_pending`]) and hands it back with
/// [`add_unschedulable_if_not_present`].
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig, SubQueue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("pod-a", 10).unwrap();
/// let mut item = queue.pop().await.expect("the queue is open");
/// assert_eq!((*item.key(), *item.data(), item.attempts()), ("pod-a", 10, 1));
/// item.set_rejectors(["NodeResourcesFit"]);
/// queue.add_unschedulable_if_not_present(item, queue.scheduling_cycle()).unwrap();
/// assert_eq!(queue.where_is(&"pod-a"), Some(SubQueue::Unschedulable));
/// # }
/// ```
///
/// [`SchedulingQueue`]: crate::scheduling::SchedulingQueue
/// [`pop`]: crate::scheduling::SchedulingQueue::pop
/// [`Popped`]: crate::scheduling::Popped
/// [`set_rejectors`]: QueuedItem::set_rejectors
/// [`set_pending`]: QueuedItem::set_pending
/// [`add_unschedulable_if_not_present`]: crate::scheduling::SchedulingQueue::add_unschedulable_if_not_present
#[derive(Debug, Clone)]
pub struct QueuedItem<K, T> {
    pub(crate) key: K,
    pub(crate) data: T,
    /// When the item was last queued (add, or requeue after a failure).
    pub(crate) timestamp: Instant,
    /// Insertion sequence: the last tiebreak of every ordering, so ties are FIFO and deterministic.
    pub(crate) seq: u64,
    pub(crate) attempts: u32,
    /// When the item first entered active; set by the first entry.
    pub(crate) initial_attempt: Option<Instant>,
    /// The bookkeeping no ordering reads, boxed on the first failure or gate, so the heaps
    /// move a small entry and an item scheduled at its first attempt never allocates. `None`
    /// reads as [`Marks::EMPTY`].
    marks: Option<Box<Marks>>,
}

/// The bookkeeping of a [`QueuedItem`] that no ordering reads.
#[derive(Debug, Clone)]
pub(crate) struct Marks {
    pub(crate) gating: Option<PluginId>,
    pub(crate) unschedulable_count: u32,
    pub(crate) consecutive_errors: u32,
    pub(crate) rejectors: Vec<PluginId>,
    pub(crate) pending: Vec<PluginId>,
    /// Last time the leftover flush re-evaluated this gated item.
    pub(crate) flushed_at: Option<Instant>,
}

/// The id of a caller-defined "plugin": whatever rejected an item, gates it, or hints about it.
///
/// Plugin ids are static names, so they are cheap to copy and compare.
pub type PluginId = &'static str;

/// What an item without a box reads.
static NO_MARKS: Marks = Marks::EMPTY;

/// Anything that carries a scheduling priority: the default order pops higher priorities first.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::Priority;
///
/// struct Pod { priority: i32 }
/// impl Priority for Pod {
///     fn priority(&self) -> i64 { i64::from(self.priority) }
/// }
/// assert_eq!(Pod { priority: 7 }.priority(), 7);
/// ```
pub trait Priority {
    /// The priority; higher pops first.
    fn priority(&self) -> i64;
}

/// The default order of the active sub-queue: higher [`Priority`] first, then earlier timestamp.
///
/// Items equal on both pop in the order they were queued.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{PriorityOrder, SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let config = SchedulingQueueConfig::default();
/// let queue = SchedulingQueue::<&str, i64, PriorityOrder>::new(config).unwrap();
/// queue.add("low", 1).unwrap();
/// queue.add("high", 100).unwrap();
/// assert_eq!(*queue.pop().await.unwrap().key(), "high");
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PriorityOrder;

// ===== impl QueuedItem =====

impl<K, T> QueuedItem<K, T> {
    pub(crate) fn new(key: K, data: T, now: Instant, seq: u64) -> Self {
        QueuedItem {
            key,
            data,
            timestamp: now,
            seq,
            attempts: 0,
            initial_attempt: None,
            marks: None,
        }
    }

    /// The boxed bookkeeping, or the empty one if there is no box yet.
    pub(crate) fn info(&self) -> &Marks {
        self.marks.as_deref().unwrap_or(&NO_MARKS)
    }

    /// The boxed bookkeeping, making the box if there is none yet.
    pub(crate) fn marks_mut(&mut self) -> &mut Marks {
        self.marks.get_or_insert_with(|| Box::new(Marks::EMPTY))
    }

    /// The item's key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The caller's data.
    pub fn data(&self) -> &T {
        &self.data
    }

    /// The caller's data, mutably (a popped item is outside the queue, so this cannot break an order).
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.data
    }

    /// The key and the data, dropping the bookkeeping.
    pub fn into_parts(self) -> (K, T) {
        (self.key, self.data)
    }

    /// When the item was last queued: on `add`, and again on every requeue after a failure.
    pub fn timestamp(&self) -> Instant {
        self.timestamp
    }

    /// How many times the item was popped.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How many attempts ended with a rejection (a non-empty rejector or pending set).
    pub fn unschedulable_count(&self) -> u32 {
        self.info().unschedulable_count
    }

    /// How many attempts in a row ended with an error (no rejectors); reset by a rejection.
    pub fn consecutive_errors(&self) -> u32 {
        self.info().consecutive_errors
    }

    /// When the item first entered the active sub-queue (not while it was gated).
    pub fn initial_attempt(&self) -> Option<Instant> {
        self.initial_attempt
    }

    /// The plugins that rejected the last attempt (including a gate that rejected it).
    pub fn rejectors(&self) -> &[PluginId] {
        &self.info().rejectors
    }

    /// The plugins that answered "pending" on the last attempt; a `Queue` hint from one of them
    /// skips the backoff.
    pub fn pending(&self) -> &[PluginId] {
        &self.info().pending
    }

    /// The gate holding the item back, if it is gated.
    pub fn gating_plugin(&self) -> Option<PluginId> {
        self.info().gating
    }

    /// Whether a gate holds the item back.
    pub fn is_gated(&self) -> bool {
        self.info().gating.is_some()
    }

    /// Replaces the rejecting plugins (duplicates are kept once).
    pub fn set_rejectors(&mut self, plugins: impl IntoIterator<Item = PluginId>) {
        if let Some(plugins) = self.plugin_list(plugins) {
            self.marks_mut().rejectors = plugins;
        }
    }

    /// Replaces the pending plugins (duplicates are kept once).
    pub fn set_pending(&mut self, plugins: impl IntoIterator<Item = PluginId>) {
        if let Some(plugins) = self.plugin_list(plugins) {
            self.marks_mut().pending = plugins;
        }
    }

    /// `plugins` without duplicates, or `None` if empty and there is no box to clear.
    fn plugin_list(&self, plugins: impl IntoIterator<Item = PluginId>) -> Option<Vec<PluginId>> {
        let mut list = Vec::new();
        for plugin in plugins {
            add_plugin(&mut list, plugin);
        }
        (!list.is_empty() || self.marks.is_some()).then_some(list)
    }

    /// True when nobody rejected the last attempt: it failed with an error.
    pub(crate) fn has_no_rejectors(&self) -> bool {
        let info = self.info();
        info.rejectors.is_empty() && info.pending.is_empty()
    }

    /// The count that drives the backoff: errors if any, else rejections.
    pub(crate) fn backoff_count(&self) -> u32 {
        let info = self.info();
        if info.consecutive_errors > 0 {
            info.consecutive_errors
        } else {
            info.unschedulable_count
        }
    }
}

// ===== impl Marks =====

impl Marks {
    /// The marks of an item never rejected or gated.
    pub(crate) const EMPTY: Marks = Marks {
        gating: None,
        unschedulable_count: 0,
        consecutive_errors: 0,
        rejectors: Vec::new(),
        pending: Vec::new(),
        flushed_at: None,
    };
}

/// Adds `plugin` to `list` unless present.
pub(crate) fn add_plugin(list: &mut Vec<PluginId>, plugin: PluginId) {
    if !list.contains(&plugin) {
        list.push(plugin);
    }
}

// ===== impl PriorityOrder =====

impl<K, T: Priority> Compare<QueuedItem<K, T>> for PriorityOrder {
    fn compare(&self, a: &QueuedItem<K, T>, b: &QueuedItem<K, T>) -> Ordering {
        b.data
            .priority()
            .cmp(&a.data.priority())
            .then_with(|| a.timestamp.cmp(&b.timestamp))
    }
}

macro_rules! priority_for_ints {
    ($($t:ty),*) => {$(
        impl Priority for $t {
            fn priority(&self) -> i64 {
                i64::from(*self)
            }
        }
    )*};
}
priority_for_ints!(i8, i16, i32, i64, u8, u16, u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_a_move_reads_fit_in_128_bytes() {
        let pending = std::mem::offset_of!(Marks, pending);
        assert!(pending + size_of::<Vec<PluginId>>() <= 128);
    }

    #[test]
    fn plugin_lists_keep_order_without_duplicates() {
        let mut item = QueuedItem::new("k", 0, Instant::now(), 0);
        item.set_rejectors(["a", "b", "a"]);
        assert_eq!(item.rejectors(), ["a", "b"]);
        item.set_rejectors(["a", "b", "c", "b"]);
        assert_eq!(item.rejectors(), ["a", "b", "c"]);
        let mut list = vec!["a"];
        add_plugin(&mut list, "a");
        add_plugin(&mut list, "d");
        assert_eq!(list, ["a", "d"]);
        assert!(Marks::EMPTY.rejectors.is_empty());
    }

    #[test]
    fn an_item_boxes_its_bookkeeping_only_when_first_needed() {
        let t0 = Instant::now();
        let mut item = QueuedItem::new("a", 0, t0, 0);
        item.initial_attempt.get_or_insert(t0);
        item.timestamp = t0;
        item.set_rejectors([]);
        assert!(
            item.marks.is_none(),
            "added, popped and requeued at once: no box"
        );
        assert_eq!(item.initial_attempt(), Some(t0));

        let t1 = t0 + std::time::Duration::from_secs(1);
        item.timestamp = t1;
        assert_eq!((item.timestamp(), item.initial_attempt()), (t1, Some(t0)));

        let mut late = QueuedItem::new("b", 0, t0, 1);
        late.initial_attempt.get_or_insert(t1); // gated at first: entered active later than its timestamp
        assert_eq!(late.initial_attempt(), Some(t1));
        late.set_pending(["p"]);
        assert_eq!(
            (late.pending(), late.initial_attempt()),
            (&["p"][..], Some(t1))
        );
    }
}
