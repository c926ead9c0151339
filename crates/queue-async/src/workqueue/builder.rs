//! [`WorkQueueBuilder`]: the options a [`WorkQueue`] is built with.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use ctrlq_queue_core::WorkState;
use ctrlq_ratelimit::RateLimiter;

use super::WorkQueue;
use crate::InBackoff;
use crate::metrics::MetricsProvider;
use crate::shared::{Machine, Options, Shared};

/// Builds a [`WorkQueue`]: its name (the metrics label), metrics provider and rate limiter.
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
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkQueueBuilder<K> {
    options: Options<K>,
}

impl<K> WorkQueueBuilder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        WorkQueueBuilder {
            options: Options::default(),
        }
    }

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

    /// What an add does to a key in failure backoff: [`InBackoff::RunNow`] (the default)
    /// or [`InBackoff::WaitOut`].
    pub fn in_backoff(mut self, in_backoff: InBackoff) -> Self {
        self.options.in_backoff = in_backoff;
        self
    }

    /// Builds the queue, bound to the current runtime if there is one (else to the first that
    /// a call of it runs in; see the crate's [Time](crate#time)). Nothing is spawned yet: the
    /// timer task starts with the first delayed add (with metrics, with the first add).
    pub fn build(self) -> WorkQueue<K> {
        WorkQueue::from_handle(Shared::new(self.options, Machine::Work(WorkState::new())))
    }
}

impl<K> fmt::Debug for WorkQueueBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("options", &self.options)
            .finish()
    }
}
