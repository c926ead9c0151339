//! The adds every [`Queue`] has: now, by reference, after a delay, after the rate limiter's
//! delay. A priority queue adds these at priority 0; its other adds are in `priority`.

use std::hash::Hash;
use std::time::Duration;

use super::Queue;
use crate::AddError;
use crate::shared::Payload;

impl<K, P> Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled. A
    /// priority queue adds it at priority 0.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert_eq!(queue.add("b").unwrap_err().into_key(), "b");
    /// ```
    pub fn add(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add(key, P::default())
    }

    /// [`add`](Self::add), by reference: the key is cloned only if the queue keeps it. Adding a
    /// key that is already queued, the common case when events for one object come in bursts,
    /// clones nothing; with `Arc` keys, no reference count is touched, which matters when
    /// several producers add the same keys from different threads.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add)'s, with a clone of the key.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// let key: Arc<str> = Arc::from("ns/obj");
    /// queue.add_ref(&key).unwrap();
    /// queue.add_ref(&key).unwrap();
    /// assert_eq!(queue.len(), 1);
    /// assert_eq!(Arc::strong_count(&key), 2, "one clone, held by the queue");
    /// ```
    pub fn add_ref(&self, key: &K) -> Result<(), AddError<K>> {
        self.inner.add(key, P::default())
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`](crate::workqueue::MAX_DELAY) are clamped.
    /// A priority queue adds it at priority 0, and absorbs the delayed add of a key that will be
    /// handed out anyway (ready, or added again while processing).
    ///
    /// The wait is timed by a background task, spawned at the first delayed add on the queue's
    /// runtime (see the crate's [Time](crate#time)); with no runtime to time it (none bound yet
    /// and none on this thread, or the queue's runtime has shut down), the key is added at
    /// once. The task ends at shutdown and when the last handle is dropped; keys still waiting
    /// then are dropped, as in the original. If the queue's runtime shuts down while keys wait,
    /// they are added then, in deadline order, rather than lost.
    ///
    /// The key is never added before its deadline, and is added at the task's first wake-up
    /// after it, together with every other key then due, in deadline order. Each key has its
    /// own timer in a `tokio_util::time::DelayQueue` (millisecond resolution, so up to about a
    /// millisecond late); the delay task polls nothing in between, so under paused time the
    /// clock jumps straight to the next deadline (a queue with metrics also ticks every
    /// [`UNFINISHED_WORK_UPDATE_PERIOD`](crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD)).
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 0);
    /// let item = queue.get().await.unwrap(); // the paused clock jumps to the deadline
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), AddError<K>> {
        self.inner.add_after(key, P::default(), delay)
    }

    /// Adds `key` after the delay the rate limiter gives it
    /// ([`RateLimiter::when`](ctrlq_ratelimit::RateLimiter::when)); a priority queue adds it
    /// at priority 0.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down (the limiter is not
    /// charged).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    /// assert_eq!(queue.num_requeues(&"a"), 1);
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add_rate_limited(key, P::default())
    }
}
