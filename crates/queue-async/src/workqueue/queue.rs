//! [`WorkQueue`]: the handle, its builder and the shared state.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use queue_core::WorkState;
use ratelimit::RateLimiter;

use crate::ShutDown;
use crate::core::{Backend, Shared, wait_drained};
use crate::get::Get;
use crate::metrics::MetricsProvider;

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
/// back ([`ShutDown`]) rather than dropped; draining waits for queued items too; an `add` of a
/// key that waits for its delay removes the waiting entry instead of running the key twice; a
/// forgotten `done` cannot wedge a key (the guard marks it done on drop); background tasks end
/// on shutdown and with the last handle.
///
/// # Examples
///
/// ```
/// use queue_async::WorkQueue;
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
pub struct WorkQueue<K> {
    pub(crate) core: Arc<dyn Backend<K, ()>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.describe(f, "WorkQueue")
    }
}

/// Builds a [`WorkQueue`]: its name (the metrics label), metrics provider and rate limiter.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use queue_async::WorkQueue;
/// use ratelimit::ExponentialRateLimiter;
///
/// let limiter = ExponentialRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap();
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .name("pods")
///     .rate_limiter(Arc::new(limiter))
///     .build();
/// assert!(queue.is_empty());
/// ```
pub struct Builder<K> {
    name: String,
    metrics: Option<Arc<dyn MetricsProvider>>,
    limiter: Option<Arc<dyn RateLimiter<K>>>,
}

impl<K> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some())
            .finish()
    }
}

impl<K> Builder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The queue's name: the `name` label of its metrics (metrics need a non-empty name).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Reports client-go's seven metrics through `provider` (with a non-empty [`name`](Self::name)).
    #[must_use]
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// The limiter behind [`add_rate_limited`](WorkQueue::add_rate_limited); by default
    /// [`ratelimit::default_controller_rate_limiter`].
    #[must_use]
    pub fn rate_limiter(mut self, limiter: Arc<dyn RateLimiter<K>>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Builds the queue. Nothing is spawned yet: the delay task starts with the first delayed
    /// add and the metrics task with the first add, each in the runtime of that call.
    pub fn build(self) -> WorkQueue<K> {
        WorkQueue {
            core: Shared::new(WorkState::new(), self.name, self.metrics, self.limiter),
        }
    }
}

// ===== impl WorkQueue =====

impl<K> Default for WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue with no name, no metrics and the default controller rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::WorkQueue<u64> = queue_async::WorkQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`Builder`] to set the name, metrics and rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::WorkQueue<u64> = queue_async::WorkQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> Builder<K> {
        Builder {
            name: String::new(),
            metrics: None,
            limiter: None,
        }
    }

    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled.
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert_eq!(queue.add("b").unwrap_err().into_key(), "b");
    /// ```
    pub fn add(&self, key: K) -> Result<(), ShutDown<K>> {
        self.core.add(key, ())
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`](crate::workqueue::MAX_DELAY) are clamped.
    ///
    /// The wait is timed by a background task, spawned on the current tokio runtime at the first
    /// delayed add (outside a runtime the key is added at once). It ends at shutdown and when the
    /// last handle is dropped; keys still waiting then are dropped, as in the original.
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 0);
    /// let item = queue.get().await.unwrap(); // the paused clock jumps to the deadline
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), ShutDown<K>> {
        self.core.clone().add_after(key, (), delay)
    }

    /// Adds `key` after the delay the rate limiter gives it ([`RateLimiter::when`]).
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down (the limiter is not charged).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    /// assert_eq!(queue.num_requeues(&"a"), 1);
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Result<(), ShutDown<K>> {
        self.core.clone().add_rate_limited(key, ())
    }

    /// Clears the rate limiter's history of `key` (call it when the key succeeded).
    pub fn forget(&self, key: &K) {
        self.core.forget(key);
    }

    /// How many times the rate limiter has delayed `key` since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> usize {
        self.core.num_requeues(key)
    }

    /// Waits for the next key: `Some(item)`, or `None` once the queue is shut down and empty.
    ///
    /// See [`Get`] for cancel safety.
    pub fn get(&self) -> Get<'_, K> {
        Get::new(&self.core)
    }

    /// Marks `key` done: for keys taken out of an item with [`Item::into_key`](crate::Item::into_key).
    /// If the key was added while it was processed, it is queued again now. A key that is not
    /// being processed is ignored.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let key = queue.get().await.unwrap().into_key();
    /// queue.add("a").unwrap(); // while processing: queued again at done
    /// assert_eq!(queue.len(), 0);
    /// queue.done(&key);
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn done(&self, key: &K) {
        self.core.done(key);
    }

    /// Keys queued and ready, not counting those being processed or waiting for a delay.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: adds are refused, keys waiting for a delay are dropped, `get` returns
    /// what is queued and then `None`. Cuts a running [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// short. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add(1).unwrap();
    /// queue.shut_down();
    /// assert!(queue.get().await.is_some()); // queued before the shutdown
    /// assert!(queue.get().await.is_none());
    /// # }
    /// ```
    pub fn shut_down(&self) {
        self.core.shut_down(false);
    }

    /// Shuts down like [`shut_down`](Self::shut_down), then waits until every queued key has been
    /// handed out and every handed-out key is done (the original waits for in-flight keys only).
    /// A concurrent `shut_down` ends the wait early.
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
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let worker = queue.clone();
    /// tokio::spawn(async move { while let Some(item) = worker.get().await { item.done() } });
    /// queue.shut_down_with_drain().await;
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    pub async fn shut_down_with_drain(&self) {
        self.core.shut_down(true);
        wait_drained(&*self.core).await;
    }

    /// Whether [`shut_down`](Self::shut_down) or [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// was called.
    pub fn is_shutting_down(&self) -> bool {
        self.core.is_shutting_down()
    }

    /// Waits until the delay task has taken in every delayed add made so far, so that a test
    /// that then advances the paused clock sees them fire (client-go's "wait for the waiting
    /// loop" helper).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_millis(50)).unwrap();
    /// queue.settle().await;
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// queue.settle().await;
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub async fn settle(&self) {
        if let Some(rx) = self.core.settle() {
            let _ = rx.await;
        }
    }

    /// The number of keys waiting for their delay.
    pub fn waiting_len(&self) -> usize {
        self.core.waiting_len()
    }

    /// The number of keys handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        self.core.processing_len()
    }
}
