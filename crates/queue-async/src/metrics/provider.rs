//! What a metrics backend implements: the four metric kinds and the per-queue
//! [`MetricsProvider`], with no-op defaults.

use std::sync::Arc;
use std::time::Duration;

/// How often a queue with metrics refreshes the unfinished-work and longest-running gauges
/// (client-go's period).
pub const UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

/// A gauge that goes up and down by one (the depth metric).
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A gauge set to a value (the unfinished-work and longest-running-processor metrics).
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A monotonically increasing counter (the adds and retries metrics).
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A distribution of observations, in seconds (the queue and work duration metrics).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// The metric that records nothing: the default of every [`MetricsProvider`] method.
///
/// # Example
///
/// ```
/// use ctrlq_queue_async::metrics::{CounterMetric, NoopMetric};
/// NoopMetric.inc();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetric;

impl GaugeMetric for NoopMetric {
    fn inc(&self) {}
    fn dec(&self) {}
}
impl SettableGaugeMetric for NoopMetric {
    fn set(&self, _value: f64) {}
}
impl CounterMetric for NoopMetric {
    fn inc(&self) {}
}
impl HistogramMetric for NoopMetric {
    fn observe(&self, _value: f64) {}
}

/// Makes the metric handles of one named queue; every method defaults to [`NoopMetric`].
///
/// Each method is called once per queue, with the queue's name (the Prometheus `name` label):
/// when the queue is built, except [`depth`], which is called at the queue's first add. The
/// priority work queue calls [`depth_for_priority`] once for each priority it first sees,
/// instead of [`depth`].
///
/// [`depth`]: MetricsProvider::depth
/// [`depth_for_priority`]: MetricsProvider::depth_for_priority
///
/// # Example
///
/// See the [module documentation](crate::metrics).
pub trait MetricsProvider: Send + Sync {
    /// The depth gauge of queue `name`.
    fn depth(&self, name: &str) -> Arc<dyn GaugeMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The depth gauge of the items of priority `priority` in queue `name` (priority queues only).
    /// The default ignores the priority and returns [`depth`](MetricsProvider::depth).
    fn depth_for_priority(&self, name: &str, priority: i32) -> Arc<dyn GaugeMetric> {
        let _ = priority;
        self.depth(name)
    }

    /// The adds counter of queue `name`.
    fn adds(&self, name: &str) -> Arc<dyn CounterMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The queue-duration histogram (seconds) of queue `name`.
    fn queue_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The work-duration histogram (seconds) of queue `name`.
    fn work_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The unfinished-work gauge (seconds) of queue `name`.
    fn unfinished_work_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The longest-running-processor gauge (seconds) of queue `name`.
    fn longest_running_processor_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The retries counter of queue `name`.
    fn retries(&self, name: &str) -> Arc<dyn CounterMetric> {
        let _ = name;
        Arc::new(NoopMetric)
    }

    /// The gauge (seconds) of how long the oldest key of priority `priority` in queue `name`
    /// has waited to be handed out (priority queues only; asked for at the first add of each
    /// priority, refreshed with the unfinished-work gauges).
    fn oldest_wait_for_priority(&self, name: &str, priority: i32) -> Arc<dyn SettableGaugeMetric> {
        let _ = (name, priority);
        Arc::new(NoopMetric)
    }
}

/// The provider whose every metric is a [`NoopMetric`].
///
/// # Example
///
/// ```
/// use ctrlq_queue_async::metrics::{MetricsProvider, NoopProvider};
/// NoopProvider.adds("q").inc();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopProvider;

impl MetricsProvider for NoopProvider {}
