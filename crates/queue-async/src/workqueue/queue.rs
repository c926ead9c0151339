//! [`WorkQueue`]: client-go's work queue with its delaying and rate-limiting layers.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::WorkQueueBuilder;
use crate::AddError;
use crate::get::Get;
use crate::shared::Shared;

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
#[derive(Clone)]
pub struct WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    inner: Arc<Shared<K>>,
}

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(super) fn from_handle(inner: Arc<Shared<K>>) -> Self {
        WorkQueue { inner }
    }

    /// The shared state, for the stream of items.
    pub(super) fn shared(&self) -> &Arc<Shared<K>> {
        &self.inner
    }

    /// A queue with no name, no metrics, no aging and the default controller rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: ctrlq_queue_async::WorkQueue<u64> = ctrlq_queue_async::WorkQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`WorkQueueBuilder`] to set the name, metrics and rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: ctrlq_queue_async::WorkQueue<u64> = ctrlq_queue_async::WorkQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> WorkQueueBuilder<K> {
        WorkQueueBuilder::new()
    }

    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled.
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
        self.inner.add(key, 0)
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`](crate::workqueue::MAX_DELAY) are clamped.
    ///
    /// The wait is timed by a background task, spawned at the first delayed add on the queue's
    /// runtime (see the crate's [Time](crate#time)); with no runtime to time it (none bound yet
    /// and none on this thread), the key is added at once. The task ends at shutdown and when
    /// the last handle is dropped; keys still waiting then are dropped, as in the original.
    ///
    /// The key is never added before its deadline, and is added at the task's first wake-up
    /// after it, together with every other key then due, in deadline order. The task sleeps
    /// until the earliest deadline on tokio's timer (millisecond ticks, so up to about a
    /// millisecond late) and polls nothing in between, so under paused time the clock jumps
    /// straight to the next deadline (a queue with metrics also ticks every
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
        self.inner.add_after(key, 0, delay)
    }

    /// Adds `key` after the delay the rate limiter gives it
    /// ([`RateLimiter::when`](ctrlq_ratelimit::RateLimiter::when)).
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
        self.inner.add_rate_limited(key, 0)
    }

    /// Waits for the next key: `Some(item)`, or `None` once the queue is shut down and empty.
    ///
    /// See [`Get`] for cancel safety.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn get(&self) -> Get<'_, K> {
        Get::new(&self.inner)
    }

    /// Clears the rate limiter's history of `key` (call it when the key succeeded).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap();
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn forget(&self, key: &K) {
        self.inner.forget(key);
    }

    /// How many times the rate limiter has delayed `key` since it was last forgotten.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap();
    /// queue.add_rate_limited("a").unwrap();
    /// assert_eq!(queue.num_requeues(&"a"), 2);
    /// # }
    /// ```
    pub fn num_requeues(&self, key: &K) -> usize {
        self.inner.num_requeues(key)
    }

    /// Marks `key` done: for keys taken out of an item with
    /// [`Item::into_key`](crate::Item::into_key). If the key was added while it was
    /// processed, it is queued again now. Ignored for a key that is not being processed, was
    /// done already, or is held by an [`Item`](crate::Item): an item's hand-out is ended by the
    /// item alone, so a stray `done` never ends it or a later hand-out of the key to another
    /// worker.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let key = queue.get().await.unwrap().into_key();
    /// queue.add("a").unwrap(); // while processing: queued again at done
    /// assert_eq!(queue.len(), 0);
    /// queue.done(&key);
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn done(&self, key: &K) {
        self.inner.done(key);
    }

    /// Keys ready to be handed out: not those being processed or waiting for a delay.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.add("a").unwrap();
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no key is ready.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::<u32>::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for their delay.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_after("a", std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    /// # }
    /// ```
    pub fn waiting_len(&self) -> usize {
        self.inner.waiting_len()
    }

    /// Keys handed out and not yet done.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(queue.processing_len(), 1);
    /// item.done();
    /// assert_eq!(queue.processing_len(), 0);
    /// # }
    /// ```
    pub fn processing_len(&self) -> usize {
        self.inner.processing_len()
    }

    /// Stops the queue: adds are refused, keys waiting for a delay are dropped, `get` returns
    /// what is ready and then `None`. Cuts a running
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) short. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add(1).unwrap();
    /// queue.shut_down();
    /// assert!(queue.get().await.is_some()); // ready before the shutdown
    /// assert!(queue.get().await.is_none());
    /// # }
    /// ```
    pub fn shut_down(&self) {
        self.inner.shut_down(false);
    }

    /// Shuts down like [`shut_down`](Self::shut_down), then waits until every ready key has
    /// been handed out and every handed-out key is done (client-go waits for in-flight keys
    /// only). A concurrent `shut_down` ends the wait early.
    ///
    /// Equivalent to `async fn shut_down_with_drain(&self)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; the queue stays shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let worker = queue.clone();
    /// tokio::spawn(async move { while let Some(item) = worker.get().await { item.done() } });
    /// queue.shut_down_with_drain().await;
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    pub async fn shut_down_with_drain(&self) {
        self.inner.shut_down(true);
        self.inner.wait_drained().await;
    }

    /// Whether [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::<u32>::new();
    /// queue.shut_down();
    /// assert!(queue.is_shutting_down());
    /// ```
    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shutting_down()
    }

    /// Adds every key whose delay is over at this instant, so that a test that advanced the
    /// paused clock sees them queued without letting the timer task run first (client-go's
    /// "wait for the waiting loop" helper).
    ///
    /// It completes at its first poll: the keys are added by the caller, not by the timer task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_millis(50)).unwrap();
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// queue.settle().await;
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub async fn settle(&self) {
        self.inner.settle();
    }

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
        self.inner.add_all(keys.into_iter().collect())
    }
}

impl<K> Default for WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.describe(f, "WorkQueue")
    }
}
