//! Errors of the scheduling queue.

use std::fmt;

use super::QueuedItem;

/// [`add_unschedulable_if_not_present`] was given an item whose key is already queued; nothing
/// changed, and the item is handed back.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("a", 1).unwrap();
/// let item = queue.pop().await.unwrap();
/// queue.add("a", 2).unwrap(); // re-added while in flight
/// let err = queue
///     .add_unschedulable_if_not_present(item, queue.scheduling_cycle())
///     .unwrap_err();
/// assert_eq!(err.to_string(), "item is already queued");
/// assert_eq!(*err.into_inner().data(), 1);
/// # }
/// ```
///
/// [`add_unschedulable_if_not_present`]: super::SchedulingQueue::add_unschedulable_if_not_present
#[derive(thiserror::Error)]
#[error("item is already queued")]
pub struct AlreadyQueuedError<K, T>(pub QueuedItem<K, T>);

impl<K, T> AlreadyQueuedError<K, T> {
    /// The item that was refused.
    pub fn into_inner(self) -> QueuedItem<K, T> {
        self.0
    }
}

impl<K, T> fmt::Debug for AlreadyQueuedError<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AlreadyQueuedError(..)")
    }
}
