//! [`QueueBuilder`]: the options every [`Queue`] is built with, and the constructors of
//! [`Queue`], which go through it.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_ratelimit::RateLimiter;

use super::Queue;
use crate::metrics::MetricsProvider;
use crate::shared::{Options, Payload, Shared};

/// Builds a [`Queue`]: its name (the metrics label), metrics provider and rate limiter, and a
/// priority queue's aging. Used by its names [`WorkQueueBuilder`] and [`PriorityQueueBuilder`].
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
///
/// [`WorkQueueBuilder`]: crate::WorkQueueBuilder
/// [`PriorityQueueBuilder`]: crate::PriorityQueueBuilder
#[must_use = "a builder does nothing until `build` is called"]
pub struct QueueBuilder<K, P = ()> {
    options: Options<K>,
    /// Set only on a priority queue's builder (`PriorityQueueBuilder::aging`).
    pub(crate) aging: Option<Duration>,
    payload: PhantomData<fn() -> P>,
}

impl<K, P> QueueBuilder<K, P> {
    fn new(options: Options<K>) -> Self {
        QueueBuilder {
            options,
            aging: None,
            payload: PhantomData,
        }
    }
}

impl<K, P> QueueBuilder<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// The queue's name: the `name` label of its metrics (metrics need a non-empty name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = name.into();
        self
    }

    /// Reports client-go's metrics through `provider` (with a non-empty [`name`](Self::name)).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.options.metrics = Some(provider);
        self
    }

    /// The limiter behind rate-limited adds; by default
    /// [`ctrlq_ratelimit::default_controller_rate_limiter`]. Any limiter, owned or shared: pass
    /// an `Arc` (of a limiter type or of `dyn RateLimiter<K>`) to keep a handle to it.
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.options.limiter = Some(Arc::new(limiter));
        self
    }

    /// Builds the queue, bound to the current runtime if there is one (else to the first that
    /// a call of it runs in; see the crate's [Time](crate#time)). Nothing is spawned yet: the
    /// delay task starts with the first delayed add and the metrics task with the first add.
    pub fn build(self) -> Queue<K, P> {
        let aging = self
            .aging
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Queue {
            inner: Shared::new(aging, self.options),
        }
    }
}

// ===== the constructors of Queue =====

impl<K, P> Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
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

    /// A [`QueueBuilder`] to set the name, metrics and rate limiter (and, for a priority
    /// queue, aging).
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: ctrlq_queue_async::WorkQueue<u64> = ctrlq_queue_async::WorkQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> QueueBuilder<K, P> {
        QueueBuilder::new(Options::default())
    }
}

impl<K, P> Default for Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, P: Payload> fmt::Debug for QueueBuilder<K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(P::BUILDER_NAME);
        d.field("options", &self.options);
        if let Some(aging) = &self.aging {
            d.field("aging", aging);
        }
        d.finish()
    }
}
