//! The Prometheus registry of the main example (`--metrics`).

use std::sync::Arc;

use queue_async::metrics::MetricsProvider;
use queue_async::prometheus::PrometheusMetrics;

/// A registry with the work-queue metrics registered.
///
/// # Examples
///
/// ```
/// let registry = examples::metrics::Registry::new();
/// let queue: queue_async::WorkQueue<&str> = queue_async::WorkQueue::builder()
///     .name("q")
///     .metrics(registry.provider())
///     .build();
/// queue.add("a").unwrap();
/// assert!(registry.encode().contains(r#"workqueue_adds_total{name="q"} 1"#));
/// ```
#[derive(Debug)]
pub struct Registry {
    registry: prometheus_client::registry::Registry,
    metrics: Arc<PrometheusMetrics>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A fresh registry with client-go's seven work-queue metrics.
    pub fn new() -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = PrometheusMetrics::register(&mut registry);
        Self { registry, metrics }
    }

    /// The provider to build queues with.
    pub fn provider(&self) -> Arc<dyn MetricsProvider> {
        self.metrics.clone()
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
