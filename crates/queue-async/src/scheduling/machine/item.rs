//! The queued item: the caller's key and data plus the queue's bookkeeping.

use std::cmp::Ordering;

use tokio::time::Instant;

use super::plugins::{PluginId, PluginSet};
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
    // What the orderings and a pop read is kept in the item; the rest is boxed, so the heaps
    // move a small entry, and the box is made only when first needed.
    pub(crate) key: K,
    pub(crate) data: T,
    /// When the item was last queued (add, or requeue after a failure).
    pub(crate) timestamp: Instant,
    /// Insertion sequence: the last tiebreak of every ordering, so ties are FIFO and deterministic.
    pub(crate) seq: u64,
    /// In the item, not in `inner`: every pop increments it, so a pop never needs the box.
    pub(crate) attempts: u32,
    /// The item entered active while it had no box, at `timestamp`: that is its initial
    /// attempt time. Never set together with `inner` (making the box moves the time into it).
    initial_is_timestamp: bool,
    /// The rest of the bookkeeping, boxed on the first failure or gate: an item added and
    /// scheduled at its first attempt never makes the box. `None` reads as [`Inner::EMPTY`].
    inner: Option<Box<Inner>>,
}

/// The bookkeeping of a [`QueuedItem`] that no ordering reads.
///
/// `repr(C)` keeps the fields a move reads (gate, counts, plugin sets: the [`Marks`]) first,
/// together, so the scan of a move reads them ahead in one place (see `unschedulable`).
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Inner {
    pub(crate) marks: Marks,
    pub(crate) initial_attempt: Option<Instant>,
    /// Last time the leftover flush re-evaluated this gated item.
    pub(crate) flushed_at: Option<Instant>,
}

/// What a move reads of an item's bookkeeping: no instants, so one static serves every
/// item without a box, whatever its instant type.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Marks {
    pub(crate) gating: Option<PluginId>,
    pub(crate) unschedulable_count: u32,
    pub(crate) consecutive_errors: u32,
    pub(crate) rejectors: PluginSet,
    pub(crate) pending: PluginSet,
}

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
            initial_is_timestamp: false,
            inner: None,
        }
    }

    /// The marks of the boxed bookkeeping, or the empty ones if there is no box yet.
    pub(crate) fn info(&self) -> &Marks {
        self.inner
            .as_deref()
            .map_or(&NO_MARKS, |inner| &inner.marks)
    }

    /// When the leftover flush last asked this gated item's gates.
    pub(crate) fn flushed_at(&self) -> Option<Instant> {
        self.inner.as_deref().and_then(|inner| inner.flushed_at)
    }

    /// The boxed bookkeeping, making the box if there is none yet.
    pub(crate) fn inner_mut(&mut self) -> &mut Inner {
        let initial_attempt = self.initial_is_timestamp.then_some(self.timestamp);
        self.initial_is_timestamp = false;
        self.inner.get_or_insert_with(|| {
            Box::new(Inner {
                marks: Marks::EMPTY,
                initial_attempt,
                flushed_at: None,
            })
        })
    }

    /// The marks of the bookkeeping, making the box if there is none yet.
    pub(crate) fn marks_mut(&mut self) -> &mut Marks {
        &mut self.inner_mut().marks
    }

    /// Sets when the item was last queued (keeping an initial attempt time that was implied by
    /// the old value).
    pub(crate) fn set_timestamp(&mut self, now: Instant) {
        if self.initial_is_timestamp && now != self.timestamp {
            self.inner_mut();
        }
        self.timestamp = now;
    }

    /// Records that the item enters active at `now`: the first time sets its initial attempt.
    pub(crate) fn enter_active(&mut self, now: Instant) {
        match &mut self.inner {
            Some(inner) => {
                inner.initial_attempt.get_or_insert(now);
            }
            None if self.initial_is_timestamp => {}
            None if now == self.timestamp => self.initial_is_timestamp = true,
            None => self.inner_mut().initial_attempt = Some(now),
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
        if self.initial_is_timestamp {
            Some(self.timestamp)
        } else {
            self.inner
                .as_deref()
                .and_then(|inner| inner.initial_attempt)
        }
    }

    /// The plugins that rejected the last attempt (including a gate that rejected it).
    pub fn rejectors(&self) -> &[PluginId] {
        self.info().rejectors.as_slice()
    }

    /// The plugins that answered "pending" on the last attempt; a `Queue` hint from one of them
    /// skips the backoff.
    pub fn pending(&self) -> &[PluginId] {
        self.info().pending.as_slice()
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
        let plugins: PluginSet = plugins.into_iter().collect();
        if !(plugins.is_empty() && self.inner.is_none()) {
            self.marks_mut().rejectors = plugins;
        }
    }

    /// Replaces the pending plugins (duplicates are kept once).
    pub fn set_pending(&mut self, plugins: impl IntoIterator<Item = PluginId>) {
        let plugins: PluginSet = plugins.into_iter().collect();
        if !(plugins.is_empty() && self.inner.is_none()) {
            self.marks_mut().pending = plugins;
        }
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
    /// The marks of an item never rejected, gated or popped from backoff.
    pub(crate) const EMPTY: Marks = Marks {
        gating: None,
        unschedulable_count: 0,
        consecutive_errors: 0,
        rejectors: PluginSet::EMPTY,
        pending: PluginSet::EMPTY,
    };
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
        let marks = std::mem::offset_of!(Inner, marks);
        assert!(marks + std::mem::offset_of!(Marks, pending) + size_of::<PluginSet>() <= 128);
    }

    #[test]
    fn an_item_boxes_its_bookkeeping_only_when_first_needed() {
        let t0 = Instant::now();
        let mut item = QueuedItem::new("a", 0, t0, 0);
        item.enter_active(t0);
        item.set_timestamp(t0);
        item.set_rejectors([]);
        assert!(
            item.inner.is_none(),
            "added, popped and requeued at once: no box"
        );
        assert_eq!(item.initial_attempt(), Some(t0));

        let t1 = t0 + std::time::Duration::from_secs(1);
        item.set_timestamp(t1);
        assert!(item.inner.is_some() && !item.initial_is_timestamp);
        assert_eq!((item.timestamp(), item.initial_attempt()), (t1, Some(t0)));

        let mut late = QueuedItem::new("b", 0, t0, 1);
        late.enter_active(t1); // gated at first: entered active later than its timestamp
        assert_eq!(late.initial_attempt(), Some(t1));
        late.set_pending(["p"]);
        assert_eq!(
            (late.pending(), late.initial_attempt()),
            (&["p"][..], Some(t1))
        );
    }
}
