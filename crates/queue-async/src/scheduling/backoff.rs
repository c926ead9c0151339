//! The backoff sub-queue: a keyed heap by backoff expiry, ties broken by the active order.

use std::cmp::Ordering;
use std::hash::Hash;
use std::sync::Arc;

use queue_core::{Compare, KeyedHeap};
use tokio::time::Instant;

use super::item::QueuedItem;

/// Earlier expiry first; equal expiries in the active order, then FIFO.
#[derive(Debug)]
pub(crate) struct BackoffOrder<C>(pub(crate) Arc<C>);

/// Items waiting out their backoff; guarded by the queue's hot lock.
#[derive(Debug)]
pub(crate) struct BackoffQueue<K, T, C> {
    pub(crate) heap: KeyedHeap<K, QueuedItem<K, T>, BackoffOrder<C>>,
}

impl<K, T, C: Compare<QueuedItem<K, T>>> Compare<QueuedItem<K, T>> for BackoffOrder<C> {
    fn compare(&self, a: &QueuedItem<K, T>, b: &QueuedItem<K, T>) -> Ordering {
        a.backoff_expiry
            .cmp(&b.backoff_expiry)
            .then_with(|| self.0.compare(a, b))
            .then_with(|| a.seq.cmp(&b.seq))
    }
}

impl<K: Hash + Eq + Clone, T, C: Compare<QueuedItem<K, T>>> BackoffQueue<K, T, C> {
    pub(crate) fn new(order: Arc<C>) -> Self {
        BackoffQueue {
            heap: KeyedHeap::new(BackoffOrder(order)),
        }
    }

    /// Inserts an item whose `backoff_expiry` is set; true if the earliest expiry got earlier.
    pub(crate) fn push(&mut self, item: QueuedItem<K, T>) -> bool {
        debug_assert!(
            item.backoff_expiry.is_some(),
            "a backoff item has an expiry"
        );
        let earliest = self.next_expiry();
        let expiry = item.backoff_expiry;
        self.heap.add(item.key.clone(), item);
        earliest.is_none_or(|e| expiry < Some(e))
    }

    /// Makes room for `incoming` more items, so a large batch does not re-hash as it grows.
    pub(crate) fn reserve(&mut self, incoming: usize) {
        self.heap.reserve(incoming);
    }

    /// The earliest expiry, for the flush timer.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.heap.peek().and_then(|(_, item)| item.backoff_expiry)
    }

    /// Pops the head if its backoff is over at `now` (expiry <= now).
    pub(crate) fn pop_completed(&mut self, now: Instant) -> Option<QueuedItem<K, T>> {
        if self.next_expiry()? <= now {
            self.heap.pop().map(|(_, item)| item)
        } else {
            None
        }
    }
}

/// `timestamp + backoff`, saturating far in the future instead of overflowing.
pub(crate) fn expiry(timestamp: Instant, backoff: std::time::Duration) -> Instant {
    timestamp
        .checked_add(backoff)
        .unwrap_or_else(|| far_future(timestamp))
}

/// About 30 years after `from` (tokio's timer handles that; `Instant` arithmetic never fails).
pub(crate) fn far_future(from: Instant) -> Instant {
    let thirty_years = std::time::Duration::from_secs(86_400 * 365 * 30);
    from.checked_add(thirty_years).unwrap_or(from)
}
