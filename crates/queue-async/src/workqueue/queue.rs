//! [`WorkQueue`]: the handle, its builder and the shared state.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use queue_core::WorkState;
use ratelimit::RateLimiter;

use crate::ShutDownError;
use crate::core::handle::{Options, builder_methods, handle_methods};
use crate::core::{Backend, Shared};
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
/// back ([`ShutDownError`]) rather than dropped; draining waits for queued items too; an `add` of a
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
    options: Options<K>,
}

impl<K> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.options.name)
            .field("metrics", &self.options.metrics.is_some())
            .field("rate_limiter", &self.options.limiter.is_some())
            .finish()
    }
}

impl<K> Builder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    builder_methods!();

    /// Builds the queue. Nothing is spawned yet: the delay task starts with the first delayed
    /// add and the metrics task with the first add, each in the runtime of that call.
    pub fn build(self) -> WorkQueue<K> {
        WorkQueue {
            core: Shared::new(WorkState::new(), self.options),
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
            options: Options::default(),
        }
    }

    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert_eq!(queue.add("b").unwrap_err().into_key(), "b");
    /// ```
    pub fn add(&self, key: K) -> Result<(), ShutDownError<K>> {
        self.core.add(key, ())
    }

    /// [`add`](Self::add), by reference: the key is cloned only if the queue keeps it. Adding a
    /// key that is already queued, the common case when events for one object come in bursts,
    /// clones nothing; with `Arc` keys, no reference count is touched, which matters when
    /// several producers add the same keys from different threads.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with a clone of the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let queue = queue_async::WorkQueue::new();
    /// let key: Arc<str> = Arc::from("ns/obj");
    /// queue.add_ref(&key).unwrap();
    /// queue.add_ref(&key).unwrap();
    /// assert_eq!(queue.len(), 1);
    /// assert_eq!(Arc::strong_count(&key), 2, "one clone, held by the queue");
    /// ```
    pub fn add_ref(&self, key: &K) -> Result<(), ShutDownError<K>> {
        self.core.add_ref(key, ())
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`](crate::workqueue::MAX_DELAY) are clamped.
    ///
    /// The wait is timed by a background task, spawned at the first delayed add on the current
    /// tokio runtime; from a plain thread, on the queue's runtime (the one it was built in, or
    /// that of its last background task); with no live runtime at all, the key is added at
    /// once. It ends at shutdown and when the last handle is dropped; keys still waiting then
    /// are dropped, as in the original. If the task's runtime is dropped while the queue lives
    /// on, the next delayed add made in a runtime starts a new task there, which takes over
    /// every waiting key.
    ///
    /// The key is never added before its deadline, and is added at the task's first wake-up
    /// after it: tokio's timer ends timers on its millisecond grid, and its driver parks for
    /// whole milliseconds, so that is up to about 1 ms late on an idle machine (the `delay`
    /// bench measures it next to bare `tokio::time::sleep_until` timers). To time keys on
    /// tokio's grid, the task sets 201 timers of its own over its first 2 ms: under paused
    /// time, the clock may stop at them on its way to a deadline.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down.
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
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), ShutDownError<K>> {
        self.core.clone().add_after(key, (), delay)
    }

    /// Adds `key` after the delay the rate limiter gives it ([`RateLimiter::when`]).
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down (the limiter is not charged).
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
    pub fn add_rate_limited(&self, key: K) -> Result<(), ShutDownError<K>> {
        self.core.clone().add_rate_limited(key, ())
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
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn get(&self) -> Get<'_, K> {
        Get::new(&self.core)
    }

    handle_methods!("WorkQueue");
}
