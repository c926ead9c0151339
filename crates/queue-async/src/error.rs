//! Errors shared by the queues.

/// An add the queue refused because it is shutting down; the key comes back to the caller.
///
/// The Go original drops an add after shutdown silently; here the caller learns that the key
/// was not added and keeps it. A queue takes as many keys as memory allows, so a shutdown is
/// the only reason an add is refused.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::{AddError, WorkQueue};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = WorkQueue::new();
/// queue.shut_down();
/// let refused = queue.add("pod-a").unwrap_err();
/// assert_eq!(refused, AddError::ShutDown("pod-a"));
/// assert_eq!(refused.to_string(), "the queue is shutting down; the key was not added");
/// assert_eq!(refused.into_key(), "pod-a");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AddError<K> {
    /// The queue is shutting down (or shut down): it takes no more keys.
    #[error("the queue is shutting down; the key was not added")]
    ShutDown(K),
}

impl<K> AddError<K> {
    /// The key that was not added.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::AddError;
    ///
    /// assert_eq!(AddError::ShutDown("pod-a").into_key(), "pod-a");
    /// ```
    pub fn into_key(self) -> K {
        match self {
            AddError::ShutDown(key) => key,
        }
    }

    /// A reference to the key that was not added.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::AddError;
    ///
    /// let refused = AddError::ShutDown(String::from("pod-a"));
    /// assert_eq!(refused.key(), "pod-a");
    /// ```
    pub fn key(&self) -> &K {
        match self {
            AddError::ShutDown(key) => key,
        }
    }
}
