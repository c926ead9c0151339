//! Iterating over the entries of a [`KeyedHeap`], borrowed or drained.

use super::{Entry, KeyedHeap};

/// An iterator over the entries of a [`KeyedHeap`], in heap (unspecified) order.
///
/// Returned by [`KeyedHeap::iter`].
#[derive(Debug)]
pub struct Iter<'a, K, V> {
    inner: std::slice::Iter<'a, Entry<K, V>>,
}

/// A draining iterator over the entries of a [`KeyedHeap`], in unspecified order.
///
/// Returned by [`KeyedHeap::drain`]. The heap is empty afterwards, even if the iterator is
/// dropped before the end.
#[derive(Debug)]
pub struct Drain<'a, K, V> {
    inner: std::vec::Drain<'a, Entry<K, V>>,
}

impl<K, V, C> KeyedHeap<K, V, C> {
    /// Iterates over every entry, in heap (unspecified) order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.add("b", 2);
    /// let mut keys: Vec<_> = heap.iter().map(|(k, _)| *k).collect();
    /// keys.sort();
    /// assert_eq!(keys, ["a", "b"]);
    /// ```
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter {
            inner: self.entries.iter(),
        }
    }

    /// Removes every entry, yielding them in unspecified order.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut heap = ctrlq_queue_core::KeyedHeap::default();
    /// heap.add("a", 1);
    /// heap.add("b", 2);
    /// assert_eq!(heap.drain().count(), 2);
    /// assert!(heap.is_empty());
    /// ```
    pub fn drain(&mut self) -> Drain<'_, K, V> {
        self.slots.clear();
        self.positions.clear();
        self.free.clear();
        Drain {
            inner: self.entries.drain(..),
        }
    }
}

impl<'a, K, V, C> IntoIterator for &'a KeyedHeap<K, V, C> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (&e.key, &e.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<K, V> Iterator for Drain<'_, K, V> {
    type Item = (K, V);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|e| (e.key, e.value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<K, V> ExactSizeIterator for Drain<'_, K, V> {}
