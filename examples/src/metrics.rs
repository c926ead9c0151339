//! The Prometheus registry of the main example (`--metrics`): the work queue's client-go
//! metrics and the controller's controller-runtime metrics.

use std::sync::Arc;

use ctrlq_controller::prometheus::ControllerMetrics;
use ctrlq_leader::prometheus::LeaderMetrics;
use ctrlq_queue_async::metrics::MetricsProvider;
use ctrlq_queue_async::prometheus::QueueMetrics;

/// A registry with the work-queue metrics registered.
///
/// # Examples
///
/// ```
/// let registry = examples::metrics::Registry::new();
/// let queue: ctrlq_queue_async::WorkQueue<&str> = ctrlq_queue_async::WorkQueue::builder()
///     .name("q")
///     .metrics(registry.provider())
///     .build();
/// queue.add("a").unwrap();
/// assert!(registry.encode().contains(r#"workqueue_adds_total{name="q"} 1"#));
/// ```
#[derive(Debug)]
pub struct Registry {
    registry: prometheus_client::registry::Registry,
    metrics: Arc<QueueMetrics>,
    controller: Arc<ControllerMetrics>,
    leader: Arc<LeaderMetrics>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A fresh registry with client-go's seven work-queue metrics and controller-runtime's six
    /// reconcile metrics and client-go's leader-election metrics.
    pub fn new() -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = QueueMetrics::register(&mut registry);
        let controller = ControllerMetrics::register(&mut registry);
        let leader = LeaderMetrics::register(&mut registry);
        Self {
            registry,
            metrics,
            controller,
            leader,
        }
    }

    /// The provider to build queues with.
    pub fn provider(&self) -> Arc<dyn MetricsProvider> {
        self.metrics.clone()
    }

    /// The controller-runtime reconcile metrics to give controllers.
    pub fn controller_metrics(&self) -> Arc<ControllerMetrics> {
        self.controller.clone()
    }

    /// The leader-election metrics to give electors.
    pub fn leader_metrics(&self) -> Arc<LeaderMetrics> {
        self.leader.clone()
    }

    /// The OpenMetrics text exposition, with histogram bounds as Go's client writes them
    /// (serve it with `ctrlq_queue_async::prometheus::CONTENT_TYPE`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = ctrlq_queue_async::prometheus::encode(&mut text, &self.registry);
        text
    }
}
