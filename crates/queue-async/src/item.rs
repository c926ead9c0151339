//! [`Item`]: a key handed out by a work queue's `get`, marked done when dropped.

use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::AddError;
use crate::shared::Shared;

/// A key being processed by one worker: no other worker gets the same key until it is done.
///
/// Finish with one of the consuming methods, which say what happens next:
///
/// | method | the key | the rate limiter |
/// |---|---|---|
/// | [`done`](Self::done) | done | unchanged |
/// | [`forget`](Self::forget) (success) | done | history cleared |
/// | [`requeue_rate_limited`](Self::requeue_rate_limited) (failure) | back after the limiter's delay | charged |
/// | [`requeue_after`](Self::requeue_after) | back after the delay | unchanged |
/// | [`requeue`](Self::requeue) | back at once | unchanged |
///
/// Dropping the item (an early return, a `?`) marks it done, so a forgotten `done` can never
/// wedge a key. A panic in the worker while it holds the item counts as a failure: the drop
/// during the unwinding adds the key back after the rate limiter's delay (as
/// [`requeue_rate_limited`](Self::requeue_rate_limited)), so no key is lost to a panic.
/// [`into_key`](Self::into_key) opts out of both: the caller then owes the queue's `done`
/// ([`WorkQueue::done`](crate::WorkQueue::done)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = ctrlq_queue_async::WorkQueue::new();
/// queue.add("ns/a").unwrap();
/// let item = queue.get().await.unwrap();
/// assert_eq!(*item, "ns/a");
/// item.requeue_rate_limited().unwrap(); // failed: back in 5 ms
/// let item = queue.get().await.unwrap();
/// item.forget(); // succeeded
/// assert_eq!(queue.num_requeues(&"ns/a"), 0);
/// # }
/// ```
pub struct Item<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    queue: Arc<Shared<K>>,
    /// The priority it was handed out at (0 for the plain work queue).
    p: i32,
    /// `Some` until a consuming method or the drop takes it.
    key: Option<K>,
}

impl<K> Item<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(queue: Arc<Shared<K>>, key: K, p: i32) -> Self {
        Self {
            queue,
            p,
            key: Some(key),
        }
    }

    /// The key.
    pub fn key(&self) -> &K {
        self.key
            .as_ref()
            .expect("the key is present until the item is consumed")
    }

    /// Marks the key done. If it was added while processing, it is queued again now.
    pub fn done(self) {
        drop(self);
    }

    /// Marks the key done and clears its rate-limiter history: the success path.
    pub fn forget(self) {
        self.queue.forget(self.key());
        drop(self);
    }

    /// Adds the key back after the rate limiter's delay, then marks it done: the failure path.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with a clone of the key if the queue is shutting down (the item is
    /// still marked done).
    pub fn requeue_rate_limited(self) -> Result<(), AddError<K>> {
        let r = self.queue.add_rate_limited(self.key().clone(), self.p);
        drop(self);
        r
    }

    /// Adds the key back after `delay`, then marks it done.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with a clone of the key if the queue is shutting down (the item is
    /// still marked done).
    pub fn requeue_after(self, delay: Duration) -> Result<(), AddError<K>> {
        let r = self.queue.add_after(self.key().clone(), self.p, delay);
        drop(self);
        r
    }

    /// Adds the key back now, then marks it done: it is handed out again after this.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with a clone of the key if the queue is shutting down (the item is
    /// still marked done).
    pub fn requeue(self) -> Result<(), AddError<K>> {
        let r = self.queue.add(self.key().clone(), self.p);
        drop(self);
        r
    }

    /// Takes the key out without marking it done: the caller must call the queue's `done` with
    /// it, once, or the key is never handed out again (client-go's contract).
    ///
    /// The queue's `done` ends only such a hand-out: while an item holds its key, the item
    /// alone ends the hand-out, so a stray `done` cannot end it, nor a later hand-out of the
    /// same key to another worker. A second `done` for a key taken out may still end a later
    /// hand-out of that key that was also taken out: the key is all it names.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let key = queue.get().await.unwrap().into_key();
    /// assert_eq!(queue.processing_len(), 1);
    /// queue.done(&key);
    /// assert_eq!(queue.processing_len(), 0);
    /// # }
    /// ```
    pub fn into_key(mut self) -> K {
        let key = self
            .key
            .take()
            .expect("the key is present until the item is consumed");
        self.queue.detach(&key);
        key
    }

    /// The priority the key was handed out at: a [`PriorityQueue`](crate::PriorityQueue)'s;
    /// 0 for a [`WorkQueue`](crate::WorkQueue)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::priority::AddOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_with("a", AddOptions::default().priority(7)).unwrap();
    /// assert_eq!(queue.get().await.unwrap().priority(), 7);
    /// # }
    /// ```
    pub fn priority(&self) -> i32 {
        self.p
    }
}

impl<K> Deref for Item<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Target = K;
    fn deref(&self) -> &K {
        self.key()
    }
}

impl<K> Drop for Item<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            if std::thread::panicking() {
                // The worker panicked holding the key: a failure, retried rate limited.
                self.queue.requeue_after_panic(key, self.p);
            } else {
                self.queue.done_item(&key);
            }
        }
    }
}

impl<K> fmt::Debug for Item<K>
where
    K: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Item")
            .field("key", self.key())
            .field("priority", &self.p)
            .finish()
    }
}
