//! client-go's work-queue metrics in a `prometheus-client` registry, under the names and help
//! texts Kubernetes dashboards already read (feature `prometheus`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `workqueue_depth` | gauge | `name`; `name`, `priority` for priority queues |
//! | `workqueue_adds_total` | counter | `name` |
//! | `workqueue_queue_duration_seconds` | histogram (1 µs … 1000 s) | `name` |
//! | `workqueue_work_duration_seconds` | histogram (1 µs … 1000 s) | `name` |
//! | `workqueue_unfinished_work_seconds` | gauge | `name` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name` |
//! | `workqueue_retries_total` | counter | `name` |
//!
//! A priority queue's depth is labelled by priority, as controller-runtime's; after
//! [`MAX_PRIORITY_LABELS`] distinct priorities of one queue, further ones share the label
//! value `exceeded_cardinality_limit`.
//!
//! # Examples
//!
//! ```
//! use prometheus_client::registry::Registry;
//! use queue_async::WorkQueue;
//! use queue_async::prometheus::PrometheusMetrics;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut registry = Registry::default();
//! let metrics = PrometheusMetrics::register(&mut registry);
//! let queue = WorkQueue::builder().name("pods").metrics(metrics).build();
//! queue.add("ns/a").unwrap();
//!
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains(r#"workqueue_adds_total{name="pods"} 1"#));
//! assert!(text.contains(r#"workqueue_depth{name="pods"} 1"#));
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric,
};

/// Distinct priorities labelled per queue before they share `exceeded_cardinality_limit`
/// (controller-runtime's limit).
pub const MAX_PRIORITY_LABELS: usize = 25;

type Labels = Vec<(String, String)>;

#[derive(Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        // client-go's ExponentialBuckets(10e-7, 10, 10): 1 µs … 1000 s.
        Histogram::new(exponential_buckets(1e-6, 10.0, 10))
    }
}

/// The seven metric families, registered once; every queue built with this provider reports
/// under its own `name` label.
pub struct PrometheusMetrics {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    queue_duration: Family<Labels, Histogram, Buckets>,
    work_duration: Family<Labels, Histogram, Buckets>,
    unfinished: Family<Labels, Gauge<f64, AtomicU64>>,
    longest: Family<Labels, Gauge<f64, AtomicU64>>,
    retries: Family<Labels, Counter>,
    priorities: Mutex<HashMap<String, HashSet<i32>>>,
}

impl fmt::Debug for PrometheusMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrometheusMetrics").finish_non_exhaustive()
    }
}

impl PrometheusMetrics {
    /// Registers the seven families in `registry` and returns the provider to give queues
    /// ([`WorkQueue`](crate::WorkQueue) and [`PriorityQueue`](crate::PriorityQueue) builders'
    /// `metrics`). Register once per registry: the names are fixed.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let me = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(Buckets),
            work_duration: Family::new_with_constructor(Buckets),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
            priorities: Mutex::new(HashMap::new()),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            me.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            me.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            me.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            me.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by \
             work_duration. Large values indicate stuck threads. One can deduce the number of \
             stuck threads by observing the rate at which this increases.",
            me.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            me.longest.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            me.retries.clone(),
        );
        Arc::new(me)
    }
}

fn name(n: &str) -> Labels {
    vec![("name".to_owned(), n.to_owned())]
}

struct PGauge(Gauge);
impl GaugeMetric for PGauge {
    fn inc(&self) {
        self.0.inc();
    }
    fn dec(&self) {
        self.0.dec();
    }
}

struct PCounter(Counter);
impl CounterMetric for PCounter {
    fn inc(&self) {
        self.0.inc();
    }
}

struct PHistogram(Histogram);
impl HistogramMetric for PHistogram {
    fn observe(&self, value: f64) {
        self.0.observe(value);
    }
}

struct PSettable(Gauge<f64, AtomicU64>);
impl SettableGaugeMetric for PSettable {
    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

impl MetricsProvider for PrometheusMetrics {
    fn depth(&self, n: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(PGauge(self.depth.get_or_create(&name(n)).clone()))
    }

    fn depth_for_priority(&self, n: &str, priority: i32) -> Arc<dyn GaugeMetric> {
        let label = {
            let mut seen = self.priorities.lock();
            let set = seen.entry(n.to_owned()).or_default();
            if set.contains(&priority) || set.len() < MAX_PRIORITY_LABELS {
                set.insert(priority);
                priority.to_string()
            } else {
                "exceeded_cardinality_limit".to_owned()
            }
        };
        let mut labels = name(n);
        labels.push(("priority".to_owned(), label));
        Arc::new(PGauge(self.depth.get_or_create(&labels).clone()))
    }

    fn adds(&self, n: &str) -> Arc<dyn CounterMetric> {
        Arc::new(PCounter(self.adds.get_or_create(&name(n)).clone()))
    }

    fn queue_duration(&self, n: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(PHistogram(
            self.queue_duration.get_or_create(&name(n)).clone(),
        ))
    }

    fn work_duration(&self, n: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(PHistogram(
            self.work_duration.get_or_create(&name(n)).clone(),
        ))
    }

    fn unfinished_work_seconds(&self, n: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(PSettable(self.unfinished.get_or_create(&name(n)).clone()))
    }

    fn longest_running_processor_seconds(&self, n: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(PSettable(self.longest.get_or_create(&name(n)).clone()))
    }

    fn retries(&self, n: &str) -> Arc<dyn CounterMetric> {
        Arc::new(PCounter(self.retries.get_or_create(&name(n)).clone()))
    }
}
