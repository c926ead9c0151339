//! [`PriorityQueueBuilder`]: the options a [`PriorityQueue`] is built with.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use ctrlq_queue_core::PriorityState;
use ctrlq_ratelimit::RateLimiter;

use super::PriorityQueue;
use crate::InBackoff;
use crate::metrics::MetricsProvider;
use crate::shared::{Machine, Options, Shared};

/// Builds a [`PriorityQueue`]: name (the metrics label), metrics, rate limiter and aging.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let queue: ctrlq_queue_async::PriorityQueue<String> = ctrlq_queue_async::PriorityQueue::builder()
///     .name("controller")
///     .aging(Duration::from_secs(10))
///     .build();
/// assert!(queue.is_empty());
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct PriorityQueueBuilder<K> {
    options: Options<K>,
    /// Nanoseconds per priority step.
    aging: Option<u64>,
}

impl<K> PriorityQueueBuilder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        PriorityQueueBuilder {
            options: Options::default(),
            aging: None,
        }
    }

    /// [`WorkQueueBuilder::name`](crate::WorkQueueBuilder::name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = name.into();
        self
    }

    /// [`WorkQueueBuilder::metrics`](crate::WorkQueueBuilder::metrics).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.options.metrics = Some(provider);
        self
    }

    /// [`WorkQueueBuilder::rate_limiter`](crate::WorkQueueBuilder::rate_limiter).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.options.limiter = Some(Arc::new(limiter));
        self
    }

    /// [`WorkQueueBuilder::in_backoff`](crate::WorkQueueBuilder::in_backoff).
    pub fn in_backoff(mut self, in_backoff: InBackoff) -> Self {
        self.options.in_backoff = in_backoff;
        self
    }

    /// Ages ready keys: waiting `interval` counts as one priority more (see the type's docs).
    /// Off by default (controller-runtime's behaviour); a zero interval also means off.
    pub fn aging(mut self, interval: Duration) -> Self {
        self.aging = Some(u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// [`WorkQueueBuilder::build`](crate::WorkQueueBuilder::build).
    pub fn build(self) -> PriorityQueue<K> {
        let machine = Machine::Priority(PriorityState::new(self.aging));
        PriorityQueue::from_handle(Shared::new(self.options, machine))
    }
}

impl<K> fmt::Debug for PriorityQueueBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PriorityQueueBuilder");
        d.field("options", &self.options);
        if let Some(aging) = self.aging {
            d.field("aging", &Duration::from_nanos(aging));
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debug_form_shows_the_options_and_the_aging_only_when_set() {
        let plain = format!("{:?}", PriorityQueueBuilder::<u32>::new().name("q"));
        assert!(plain.contains("name: \"q\""), "{plain}");
        assert!(!plain.contains("aging"), "{plain}");
        let aged = format!(
            "{:?}",
            PriorityQueueBuilder::<u32>::new().aging(Duration::from_secs(10))
        );
        assert!(aged.contains("aging: 10s"), "{aged}");
    }
}
