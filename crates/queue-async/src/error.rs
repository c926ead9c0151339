//! Errors shared by the work queues.

/// An add refused because the queue is shutting down; the key comes back to the caller.
///
/// The Go original drops such adds silently; here the caller learns it and keeps the key.
///
/// # Example
///
/// ```
/// use ctrlq_queue_async::ShutDownError;
///
/// let refused = ShutDownError("pod-a");
/// assert_eq!(refused.to_string(), "the queue is shutting down; the key was not added");
/// assert_eq!(refused.into_key(), "pod-a");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("the queue is shutting down; the key was not added")]
pub struct ShutDownError<K>(pub K);

impl<K> ShutDownError<K> {
    /// The key that was not added.
    pub fn into_key(self) -> K {
        self.0
    }
}
