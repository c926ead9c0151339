//! The backoff sub-queue: keyed heaps by backoff expiry, ties broken by the active order.

use std::cmp::Ordering;
use std::hash::Hash;
use std::sync::Arc;

use tokio::time::Instant;

use super::item::QueuedItem;
use ctrlq_queue_core::{Compare, KeyedHeap};

/// Earlier expiry first; equal expiries in the active order, then FIFO.
#[derive(Debug)]
pub(crate) struct BackoffOrder<C>(pub(crate) Arc<C>);

/// An item in backoff and the moment its backoff ends.
///
/// The expiry lives here, not in the item: only the backoff heap orders by it, so the active
/// heap's entries do not carry it.
#[derive(Debug)]
pub(crate) struct Waiting<K, T> {
    expiry: Instant,
    pub(super) item: QueuedItem<K, T>,
}

/// Items waiting out their backoff.
///
/// Two heaps, as kube-scheduler's `podBackoffQ` and `podErrorBackoffQ`: items whose last
/// attempt was rejected (a rejector or pending plugin) and items whose attempt failed with an
/// error (neither). Only the first may be popped before its backoff ends (pop-from-backoff);
/// an error always waits out its backoff, so an idle queue never retries errors at once.
///
/// # Invariants
///
/// 1. A key is in at most one of the two heaps.
/// 2. An item is in `errors` exactly when it has no rejectors and no pending plugins.
#[derive(Debug)]
pub(crate) struct BackoffQueue<K, T, C> {
    /// The items pop-from-backoff may take early, and the only ones a move brings here.
    pub(super) rejected: KeyedHeap<K, Waiting<K, T>, BackoffOrder<C>>,
    errors: KeyedHeap<K, Waiting<K, T>, BackoffOrder<C>>,
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
        self.rejected.len() + self.errors.len()
    }
}

impl<K, T, C> BackoffQueue<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    pub(crate) fn new(order: Arc<C>) -> Self {
        BackoffQueue {
            rejected: KeyedHeap::new(BackoffOrder(order.clone())),
            errors: KeyedHeap::new(BackoffOrder(order)),
        }
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.rejected.contains_key(key) || self.errors.contains_key(key)
    }

    /// The keys, in no particular order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        let rejected = self.rejected.iter().map(|(k, _)| k);
        rejected.chain(self.errors.iter().map(|(k, _)| k))
    }

    /// Inserts an item that waits until `expiry`, in the heap its last attempt's outcome
    /// chooses.
    pub(crate) fn push(&mut self, item: QueuedItem<K, T>, expiry: Instant) {
        let heap = if item.has_no_rejectors() {
            &mut self.errors
        } else {
            &mut self.rejected
        };
        heap.add(item.key.clone(), Waiting { expiry, item });
    }

    /// Changes `key`'s item in place and re-orders it (the caller's order may read what
    /// changed); false if `key` is not here. `f` must not change the item's plugin sets.
    pub(crate) fn update(&mut self, key: &K, f: impl FnOnce(&mut QueuedItem<K, T>)) -> bool {
        if self.rejected.contains_key(key) {
            self.rejected.update(key, |w| f(&mut w.item))
        } else {
            self.errors.update(key, |w| f(&mut w.item))
        }
    }

    /// Removes `key`'s item, whatever its expiry.
    pub(crate) fn delete(&mut self, key: &K) -> Option<QueuedItem<K, T>> {
        self.rejected
            .delete(key)
            .or_else(|| self.errors.delete(key))
            .map(|(_, w)| w.item)
    }

    /// The earliest expiry, for the flush timer.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        let (rejected, errors) = self.head_expiries();
        rejected.into_iter().chain(errors).min()
    }

    /// Pops the earliest head of the two heaps (the rejected one on a tie) if its backoff is
    /// over at `until` (expiry <= until), or whatever its expiry if `until` is `None`.
    pub(crate) fn pop_completed(&mut self, until: Option<Instant>) -> Option<QueuedItem<K, T>> {
        let (rejected, errors) = self.head_expiries();
        let heap = if errors.is_some_and(|e| rejected.is_none_or(|r| e < r)) {
            &mut self.errors
        } else {
            &mut self.rejected
        };
        let expiry = heap.peek()?.1.expiry;
        if until.is_some_and(|until| expiry > until) {
            return None;
        }
        heap.pop().map(|(_, w)| w.item)
    }

    /// The expiries of the heads of `rejected` and `errors`.
    fn head_expiries(&self) -> (Option<Instant>, Option<Instant>) {
        let rejected = self.rejected.peek().map(|(_, w)| w.expiry);
        (rejected, self.errors.peek().map(|(_, w)| w.expiry))
    }
}
