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

/// An item in backoff and the moment its backoff ends.
///
/// The expiry lives here, not in the item, so the active heap's entries (which never need it)
/// stay 16 bytes smaller: a pop there reads fewer cache lines per level.
#[derive(Debug)]
pub(crate) struct Waiting<K, T> {
    expiry: Instant,
    item: QueuedItem<K, T>,
}

/// Items waiting out their backoff; guarded by the queue's hot lock.
#[derive(Debug)]
pub(crate) struct BackoffQueue<K, T, C> {
    heap: KeyedHeap<K, Waiting<K, T>, BackoffOrder<C>>,
}

impl<K, T, C: Compare<QueuedItem<K, T>>> Compare<Waiting<K, T>> for BackoffOrder<C> {
    fn compare(&self, a: &Waiting<K, T>, b: &Waiting<K, T>) -> Ordering {
        a.expiry
            .cmp(&b.expiry)
            .then_with(|| self.0.compare(&a.item, &b.item))
            .then_with(|| a.item.seq.cmp(&b.item.seq))
    }
}

impl<K, T, C> BackoffQueue<K, T, C> {
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

impl<K: Hash + Eq + Clone, T, C: Compare<QueuedItem<K, T>>> BackoffQueue<K, T, C> {
    pub(crate) fn new(order: Arc<C>) -> Self {
        BackoffQueue {
            heap: KeyedHeap::new(BackoffOrder(order)),
        }
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.heap.contains_key(key)
    }

    /// The keys, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.heap.iter().map(|(k, _)| k)
    }

    /// Inserts an item that waits until `expiry`; true if the earliest expiry got earlier.
    pub(crate) fn push(&mut self, item: QueuedItem<K, T>, expiry: Instant) -> bool {
        let earliest = self.next_expiry();
        self.heap.add(item.key.clone(), Waiting { expiry, item });
        earliest.is_none_or(|e| expiry < e)
    }

    /// Changes `key`'s item in place and re-orders it (the caller's order may read what
    /// changed); false if `key` is not here.
    pub(crate) fn update(&mut self, key: &K, f: impl FnOnce(&mut QueuedItem<K, T>)) -> bool {
        self.heap.update(key, |w| f(&mut w.item))
    }

    /// Removes `key`'s item, whatever its expiry.
    pub(crate) fn delete(&mut self, key: &K) -> Option<QueuedItem<K, T>> {
        self.heap.delete(key).map(|(_, w)| w.item)
    }

    /// Removes the item whose backoff ends first, over or not, with the heap's copy of its key.
    pub(crate) fn pop(&mut self) -> Option<(K, QueuedItem<K, T>)> {
        self.heap.pop().map(|(k, w)| (k, w.item))
    }

    /// Makes room for `incoming` more items, so a large batch does not re-hash as it grows.
    pub(crate) fn reserve(&mut self, incoming: usize) {
        self.heap.reserve(incoming);
    }

    /// The earliest expiry, for the flush timer.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.heap.peek().map(|(_, w)| w.expiry)
    }

    /// Pops the head if its backoff is over at `now` (expiry <= now).
    pub(crate) fn pop_completed(&mut self, now: Instant) -> Option<QueuedItem<K, T>> {
        if self.next_expiry()? <= now {
            self.pop().map(|(_, item)| item)
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
