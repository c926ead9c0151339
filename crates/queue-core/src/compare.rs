//! The orderings a [`KeyedHeap`](crate::KeyedHeap) can be built with.

use std::cmp::Ordering;

/// Decides which of two values pops first from a [`KeyedHeap`](crate::KeyedHeap):
/// `compare(a, b) == Less` means `a` pops before `b`.
///
/// Implemented by [`MinOrder`], [`MaxOrder`] and every `Fn(&V, &V) -> Ordering`. The ordering
/// must be a strict weak order that does not change while a value sits in the heap.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{Compare, KeyedHeap};
/// use std::cmp::Ordering;
///
/// /// Higher priority first, then the older timestamp.
/// #[derive(Debug, Default)]
/// struct ByPriority;
///
/// impl Compare<(i32, u64)> for ByPriority {
///     fn compare(&self, a: &(i32, u64), b: &(i32, u64)) -> Ordering {
///         b.0.cmp(&a.0).then(a.1.cmp(&b.1))
///     }
/// }
///
/// let mut heap = KeyedHeap::new(ByPriority);
/// heap.add("low", (1, 0));
/// heap.add("high", (9, 5));
/// assert_eq!(heap.pop().map(|(k, _)| k), Some("high"));
/// ```
pub trait Compare<V: ?Sized> {
    /// `Less` when `a` pops before `b`, `Greater` when after, `Equal` when either may.
    fn compare(&self, a: &V, b: &V) -> Ordering;
}

/// The smallest value (by `Ord`) pops first: a min-heap.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{KeyedHeap, MinOrder};
///
/// let mut heap = KeyedHeap::new(MinOrder);
/// heap.add("b", 2);
/// heap.add("a", 1);
/// assert_eq!(heap.pop(), Some(("a", 1)));
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MinOrder;

/// The largest value (by `Ord`) pops first: a max-heap.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_core::{KeyedHeap, MaxOrder};
///
/// let mut heap = KeyedHeap::new(MaxOrder);
/// heap.add("b", 2);
/// heap.add("a", 1);
/// assert_eq!(heap.pop(), Some(("b", 2)));
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MaxOrder;

impl<V: Ord + ?Sized> Compare<V> for MinOrder {
    fn compare(&self, a: &V, b: &V) -> Ordering {
        a.cmp(b)
    }
}

impl<V: Ord + ?Sized> Compare<V> for MaxOrder {
    fn compare(&self, a: &V, b: &V) -> Ordering {
        b.cmp(a)
    }
}

impl<V: ?Sized, F> Compare<V> for F
where
    F: Fn(&V, &V) -> Ordering + ?Sized,
{
    fn compare(&self, a: &V, b: &V) -> Ordering {
        self(a, b)
    }
}
