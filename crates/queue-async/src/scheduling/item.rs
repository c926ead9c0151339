//! The queued item: the caller's key and data plus the queue's bookkeeping.

use std::cmp::Ordering;

use queue_core::Compare;
use tokio::time::Instant;

/// The id of a caller-defined "plugin": whatever rejected an item, gates it, or hints about it.
///
/// Plugin ids are static names, so they are cheap to copy and compare.
pub type PluginId = &'static str;

/// An item of a [`SchedulingQueue`]: the caller's key and data, and the queue's bookkeeping.
///
/// [`pop`] hands one out; the caller tries it and, on failure, records who rejected it
/// ([`set_rejectors`], [`set_pending`]) and hands it back with
/// [`add_unschedulable_if_not_present`].
///
/// # Examples
///
/// ```
/// use queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default());
/// queue.add("pod-a", 10);
/// let mut item = queue.pop().await.expect("the queue is open");
/// assert_eq!((*item.key(), *item.data(), item.attempts()), ("pod-a", 10, 1));
/// item.set_rejectors(["NodeResourcesFit"]);
/// queue.add_unschedulable_if_not_present(item, queue.scheduling_cycle()).unwrap();
/// assert_eq!(queue.num_unschedulable(), 1);
/// # }
/// ```
///
/// [`SchedulingQueue`]: super::SchedulingQueue
/// [`pop`]: super::SchedulingQueue::pop
/// [`set_rejectors`]: QueuedItem::set_rejectors
/// [`set_pending`]: QueuedItem::set_pending
/// [`add_unschedulable_if_not_present`]: super::SchedulingQueue::add_unschedulable_if_not_present
#[derive(Debug, Clone)]
pub struct QueuedItem<K, T> {
    // What the orderings read stays inline (heap sifts compare without a pointer chase); the
    // rest is boxed, so the heaps move a small entry.
    pub(crate) key: K,
    pub(crate) data: T,
    /// When the item was last queued (add, or requeue after a failure).
    pub(crate) timestamp: Instant,
    /// Insertion sequence: the last tiebreak of every ordering, so ties are FIFO and deterministic.
    pub(crate) seq: u64,
    /// Set while the item is in the backoff sub-queue: its position there.
    pub(crate) backoff_expiry: Option<Instant>,
    pub(crate) inner: Box<Inner>,
}

/// The bookkeeping of a [`QueuedItem`] that no ordering reads.
///
/// `repr(C)` keeps the fields a move reads (gate, counts, plugin sets) together in the first
/// 128 bytes, so reading them ahead of a move costs two or three cache lines, not four.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Inner {
    pub(crate) gating: Option<PluginId>,
    pub(crate) attempts: u32,
    pub(crate) unschedulable_count: u32,
    pub(crate) consecutive_errors: u32,
    pub(crate) rejectors: PluginSet,
    pub(crate) pending: PluginSet,
    pub(crate) initial_attempt: Option<Instant>,
    /// Last time the leftover flush re-evaluated this gated item.
    pub(crate) flushed_at: Option<Instant>,
}

/// Anything that carries a scheduling priority: the default order pops higher priorities first.
///
/// # Examples
///
/// ```
/// use queue_async::scheduling::Priority;
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
/// use queue_async::scheduling::{PriorityOrder, SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64, PriorityOrder>::new(SchedulingQueueConfig::default());
/// queue.add("low", 1);
/// queue.add("high", 100);
/// assert_eq!(*queue.pop().await.unwrap().key(), "high");
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PriorityOrder;

// ===== impl QueuedItem =====

impl<K, T> QueuedItem<K, T> {
    pub(crate) fn new(key: K, data: T, now: Instant, seq: u64) -> Self {
        let inner = Inner {
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors: 0,
            initial_attempt: None,
            rejectors: PluginSet::default(),
            pending: PluginSet::default(),
            gating: None,
            flushed_at: None,
        };
        QueuedItem {
            key,
            data,
            timestamp: now,
            seq,
            backoff_expiry: None,
            inner: Box::new(inner),
        }
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
        self.inner.attempts
    }

    /// How many attempts ended with a rejection (a non-empty rejector or pending set).
    pub fn unschedulable_count(&self) -> u32 {
        self.inner.unschedulable_count
    }

    /// How many attempts in a row ended with an error (no rejectors); reset by a rejection.
    pub fn consecutive_errors(&self) -> u32 {
        self.inner.consecutive_errors
    }

    /// When the item first entered the active sub-queue (not while it was gated).
    pub fn initial_attempt(&self) -> Option<Instant> {
        self.inner.initial_attempt
    }

    /// The plugins that rejected the last attempt (including a gate that rejected it).
    pub fn rejectors(&self) -> &[PluginId] {
        self.inner.rejectors.as_slice()
    }

    /// The plugins that answered "pending" on the last attempt; a `Queue` hint from one of them
    /// skips the backoff.
    pub fn pending(&self) -> &[PluginId] {
        self.inner.pending.as_slice()
    }

    /// The gate holding the item back, if it is gated.
    pub fn gating_plugin(&self) -> Option<PluginId> {
        self.inner.gating
    }

    /// Whether a gate holds the item back.
    pub fn is_gated(&self) -> bool {
        self.inner.gating.is_some()
    }

    /// Replaces the rejecting plugins (duplicates are kept once).
    pub fn set_rejectors(&mut self, plugins: impl IntoIterator<Item = PluginId>) {
        self.inner.rejectors = plugins.into_iter().collect();
    }

    /// Replaces the pending plugins (duplicates are kept once).
    pub fn set_pending(&mut self, plugins: impl IntoIterator<Item = PluginId>) {
        self.inner.pending = plugins.into_iter().collect();
    }

    /// True when nobody rejected the last attempt: it failed with an error.
    pub(crate) fn has_no_rejectors(&self) -> bool {
        self.inner.rejectors.is_empty() && self.inner.pending.is_empty()
    }

    /// The count that drives the backoff: errors if any, else rejections.
    pub(crate) fn backoff_count(&self) -> u32 {
        if self.inner.consecutive_errors > 0 {
            self.inner.consecutive_errors
        } else {
            self.inner.unschedulable_count
        }
    }
}

// ===== impl PluginSet =====

/// A set of plugin ids, inline up to two (the common case), so reading an item's rejectors
/// during a move costs no extra pointer chase; 48 bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct PluginSet {
    inline: [PluginId; 2],
    len: u8,
    /// All the ids once there are more than two.
    #[expect(
        clippy::box_collection,
        reason = "a thin pointer keeps the set at 48 bytes (a `Vec` or boxed slice: 56)"
    )]
    spill: Option<Box<Vec<PluginId>>>,
}

impl PluginSet {
    pub(crate) fn as_slice(&self) -> &[PluginId] {
        match &self.spill {
            Some(all) => all,
            None => &self.inline[..usize::from(self.len)],
        }
    }

    pub(crate) fn contains(&self, plugin: &PluginId) -> bool {
        self.as_slice().contains(plugin)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && self.spill.is_none()
    }

    /// Adds `plugin` unless present.
    pub(crate) fn push(&mut self, plugin: PluginId) {
        if self.contains(&plugin) {
            return;
        }
        if let Some(all) = &mut self.spill {
            all.push(plugin);
        } else if usize::from(self.len) < self.inline.len() {
            self.inline[usize::from(self.len)] = plugin;
            self.len += 1;
        } else {
            let mut all = self.inline.to_vec();
            all.push(plugin);
            self.spill = Some(Box::new(all));
        }
    }
}

impl FromIterator<PluginId> for PluginSet {
    fn from_iter<I: IntoIterator<Item = PluginId>>(iter: I) -> Self {
        let mut set = PluginSet::default();
        for plugin in iter {
            set.push(plugin);
        }
        set
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
        assert_eq!(size_of::<PluginSet>(), 48);
        assert!(std::mem::offset_of!(Inner, pending) + size_of::<PluginSet>() <= 128);
    }

    #[test]
    fn plugin_sets_keep_order_without_duplicates_inline_and_spilled() {
        let mut set: PluginSet = ["a", "b", "a"].into_iter().collect();
        assert_eq!(set.as_slice(), ["a", "b"]);
        assert!(set.spill.is_none());
        set.push("c");
        set.push("b");
        assert_eq!(set.as_slice(), ["a", "b", "c"]);
        assert!(set.contains(&"c") && !set.contains(&"d") && !set.is_empty());
        assert!(PluginSet::default().is_empty());
    }
}
