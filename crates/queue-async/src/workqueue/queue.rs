//! [`WorkQueue`] and its builder, [`WorkQueueBuilder`]: the [`Queue`] whose adds carry nothing
//! but the key, and what only it has.

use std::hash::Hash;

use crate::AddError;
use crate::queue::{Queue, QueueBuilder};

/// A de-duplicating work queue that worker tasks await on: client-go's work queue with its
/// delaying and rate-limiting layers, in one cheap [`Clone`] handle.
///
/// - [`add`](Self::add) queues a key unless it is already queued; a key being processed is queued
///   again when its worker is done, so one key is never handed to two workers at once.
/// - [`get`](Self::get) awaits the next key and hands it out as an [`Item`](crate::Item), a guard
///   that marks the key done when dropped.
/// - [`add_after`](Self::add_after) and [`add_rate_limited`](Self::add_rate_limited) add later,
///   from a background task that sleeps until exactly the next deadline.
/// - [`shut_down`](Self::shut_down) stops new adds; `get` still returns what is queued, then
///   `None`. [`shut_down_with_drain`](Self::shut_down_with_drain) also waits until everything queued
///   and in flight is done.
///
/// Differences from the original, all deliberate: an add after shutdown is refused with the key
/// back ([`AddError`]) rather than dropped; draining waits for queued items too; an `add` of a
/// key that waits for its delay removes the waiting entry instead of running the key twice; a
/// forgotten `done` cannot wedge a key (the guard marks it done on drop); a worker that panics
/// holding a key fails it (requeued rate limited); background tasks end on shutdown and with
/// the last handle. The crate's [design notes](crate#design) describe the inside.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = WorkQueue::new();
/// queue.add("ns/a").unwrap();
/// queue.add("ns/a").unwrap(); // coalesced
/// assert_eq!(queue.len(), 1);
///
/// let worker = {
///     let queue = queue.clone();
///     tokio::spawn(async move {
///         let mut seen = Vec::new();
///         while let Some(item) = queue.get().await {
///             seen.push(*item.key());
///             item.done();
///         }
///         seen
///     })
/// };
/// queue.shut_down_with_drain().await;
/// assert_eq!(worker.await.unwrap(), ["ns/a"]);
/// # }
/// ```
///
/// Every method but [`add_all`](Self::add_all) and [`stream`](Self::stream) is the
/// [`Queue`]'s, shared with [`PriorityQueue`](crate::PriorityQueue).
pub type WorkQueue<K> = Queue<K, ()>;

/// Builds a [`WorkQueue`]: its name (the metrics label), metrics provider and rate limiter
/// (a [`QueueBuilder`]).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ctrlq_queue_async::WorkQueue;
/// use ctrlq_ratelimit::ExponentialRateLimiter;
///
/// let limiter = ExponentialRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap();
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .name("pods")
///     .rate_limiter(Arc::new(limiter))
///     .build();
/// assert!(queue.is_empty());
/// ```
pub type WorkQueueBuilder<K> = QueueBuilder<K, ()>;

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// Adds every key of `keys`, in order, as [`add`](Self::add) would one by one, under one
    /// hold of the queue's lock, so workers see the burst (a relist, a batch of watch events)
    /// queued together. The keys are collected before the lock is taken, so the iterator may
    /// do anything, even call this queue.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with every key of `keys` (none, for an empty batch) if the queue
    /// is shutting down: none was added.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_all(["a", "b", "a"]).unwrap();
    /// assert_eq!(queue.len(), 2);
    /// queue.shut_down();
    /// assert_eq!(queue.add_all(["c", "d"]).unwrap_err().into_key(), ["c", "d"]);
    /// ```
    pub fn add_all(&self, keys: impl IntoIterator<Item = K>) -> Result<(), AddError<Vec<K>>> {
        self.inner.add_all(keys.into_iter().collect(), ())
    }
}
