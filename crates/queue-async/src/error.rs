//! Errors shared by the queues.

/// An add the queue refused; the key comes back to the caller.
///
/// The Go original drops an add after shutdown silently; here the caller learns why the key
/// was not added and keeps it. A queue holds at most `u32::MAX` keys (queued and being
/// processed together); past that, a new key is refused as [`Full`](AddError::Full), while
/// adds of keys it already holds still coalesce.
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
    /// The queue holds `u32::MAX` keys, queued and being processed together, and the key is not
    /// one of them: it takes no new key until one is done.
    #[error("the queue is full (it holds u32::MAX keys); the key was not added")]
    Full(K),
}

impl<K> AddError<K> {
    /// The key that was not added.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::AddError;
    ///
    /// assert_eq!(AddError::Full("pod-a").into_key(), "pod-a");
    /// ```
    pub fn into_key(self) -> K {
        match self {
            AddError::ShutDown(key) | AddError::Full(key) => key,
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
            AddError::ShutDown(key) | AddError::Full(key) => key,
        }
    }

    /// Whether the add was refused because the queue is shutting down: no later add will
    /// succeed. `false` for a full queue, which takes new keys again once some are done.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::AddError;
    ///
    /// assert!(AddError::ShutDown("pod-a").is_shut_down());
    /// assert!(!AddError::Full("pod-a").is_shut_down());
    /// ```
    pub fn is_shut_down(&self) -> bool {
        matches!(self, AddError::ShutDown(_))
    }
}

/// The keys of a batch that were refused, and whether any was refused for a shutdown.
pub(crate) struct Refused<K> {
    keys: Vec<K>,
    shut_down: bool,
}

impl<K> Default for Refused<K> {
    fn default() -> Self {
        Refused {
            keys: Vec::new(),
            shut_down: false,
        }
    }
}

impl<K> Refused<K> {
    /// Records the result of one key's add.
    pub(crate) fn note(&mut self, added: Result<(), AddError<K>>) {
        if let Err(e) = added {
            self.shut_down |= e.is_shut_down();
            self.keys.push(e.into_key());
        }
    }

    /// `ShutDown` if any key was refused for a shutdown (no later add succeeds), else `Full`.
    pub(crate) fn into_result(self) -> Result<(), AddError<Vec<K>>> {
        match (self.keys.is_empty(), self.shut_down) {
            (true, _) => Ok(()),
            (false, true) => Err(AddError::ShutDown(self.keys)),
            (false, false) => Err(AddError::Full(self.keys)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_error_says_so_and_keeps_the_key() {
        let full = AddError::Full("a");
        assert_eq!(
            full.to_string(),
            "the queue is full (it holds u32::MAX keys); the key was not added"
        );
        assert!(!full.is_shut_down());
        assert_eq!(*full.key(), "a");
    }

    #[test]
    fn a_batch_is_refused_as_shut_down_if_any_key_was() {
        let mut refused = Refused::<&str>::default();
        refused.note(Ok(()));
        assert_eq!(refused.into_result(), Ok(()));

        let mut refused = Refused::default();
        refused.note(Err(AddError::Full("a")));
        refused.note(Ok(()));
        refused.note(Err(AddError::Full("c")));
        assert_eq!(refused.into_result(), Err(AddError::Full(vec!["a", "c"])));

        let mut refused = Refused::default();
        refused.note(Err(AddError::Full("a")));
        refused.note(Err(AddError::ShutDown("b")));
        assert_eq!(
            refused.into_result(),
            Err(AddError::ShutDown(vec!["a", "b"])),
            "a shutdown is the lasting reason"
        );
    }
}
