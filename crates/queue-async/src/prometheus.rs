//! client-go's work-queue metrics in a `prometheus-client` registry, under the names, help
//! texts and bucket bounds Kubernetes dashboards already read (feature `prometheus`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `workqueue_depth` | gauge | `name`; `name`, `priority` for priority queues |
//! | `workqueue_adds_total` | counter | `name` |
//! | `workqueue_queue_duration_seconds` | histogram | `name` |
//! | `workqueue_work_duration_seconds` | histogram | `name` |
//! | `workqueue_unfinished_work_seconds` | gauge | `name` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name` |
//! | `workqueue_retries_total` | counter | `name` |
//!
//! The definitions are component-base's (`k8s.io/component-base/metrics/prometheus/workqueue`),
//! which client-go's queues report to in every Kubernetes component:
//!
//! - **Help texts** are its `Help` strings, verbatim (Kubernetes components render them with a
//!   `[BETA] ` stability prefix, controller-runtime without; this module as controller-runtime).
//! - **Histogram bounds** are its `ExponentialBuckets(10e-7, 10, 10)`, computed as Go computes
//!   them (each bound the previous one times 10, in `f64`), so every bound is the same
//!   floating-point number as Go's: `1e-06`, `9.999999999999999e-06`, `9.999999999999999e-05`,
//!   `0.001`, `0.01`, `0.1`, `1`, `10`, `100`, `1000`. An observation equal to a bound counts in
//!   that bucket (`le`), so `0.1` s counts in `le="0.1"`. The encoder writes a bound in its own
//!   shortest form (`1.0` and `0.000009999999999999999` where Go writes `1` and
//!   `9.999999999999999e-06`); Prometheus reads both as the same number.
//! - **Counters** are written in the OpenMetrics text format `prometheus-client` produces: the
//!   samples are `workqueue_adds_total` and `workqueue_retries_total` as Go's, and the `# HELP`
//!   and `# TYPE` lines name the family without its `_total`.
//!
//! What each metric counts is described in [`metrics`](crate::metrics). In particular
//! `workqueue_retries_total` counts as client-go's for a [`WorkQueue`](crate::WorkQueue): every
//! delayed or rate-limited add the queue accepts, a zero delay included; and as
//! controller-runtime's for a [`PriorityQueue`](crate::PriorityQueue): only adds whose delay is
//! above zero. `workqueue_unfinished_work_seconds` and
//! `workqueue_longest_running_processor_seconds` are refreshed every
//! [`UNFINISHED_WORK_UPDATE_PERIOD`](crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD), and go back
//! to 0 as soon as no key is being processed.
//!
//! A priority queue's depth is labelled by priority, as controller-runtime's; after
//! [`MAX_PRIORITY_LABELS`] distinct priorities of one queue, further ones share the label
//! value `exceeded_cardinality_limit`.
//!
//! # Examples
//!
//! ```
//! use prometheus_client::registry::Registry;
//! use ctrlq_queue_async::WorkQueue;
//! use ctrlq_queue_async::prometheus::QueueMetrics;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut registry = Registry::default();
//! let metrics = QueueMetrics::register(&mut registry);
//! let queue = WorkQueue::builder().name("pods").metrics(metrics).build();
//! queue.add("ns/a").unwrap();
//!
//! let mut text = String::new();
//! prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
//! assert!(text.contains(r#"workqueue_adds_total{name="pods"} 1"#));
//! assert!(text.contains(r#"workqueue_depth{name="pods"} 1"#));
//! assert!(text.contains("# HELP workqueue_depth Current depth of workqueue\n"));
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric,
};

/// Distinct priorities labelled per queue before they share `exceeded_cardinality_limit`
/// (controller-runtime's limit).
pub const MAX_PRIORITY_LABELS: usize = 25;

type Labels = Vec<(String, String)>;

/// Go's `prometheus.ExponentialBuckets(start, factor, count)`: each bound is the previous one
/// times `factor`, rounded as `f64` at each step. (`start · factor^i` in one step rounds
/// differently: `1e-6 · 10^5` is `0.09999999999999999`, where Go's fifth product is `0.1`.)
fn go_exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut bounds = Vec::with_capacity(count);
    let mut bound = start;
    for _ in 0..count {
        bounds.push(bound);
        bound *= factor;
    }
    bounds
}

#[derive(Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        // component-base's ExponentialBuckets(10e-7, 10, 10): 1 µs … 1000 s.
        Histogram::new(go_exponential_buckets(1e-6, 10.0, 10))
    }
}

// component-base's help texts, verbatim: the collector writes them as they are (a registry's
// `register` would add a period to each).
const DEPTH_HELP: &str = "Current depth of workqueue";
const ADDS_HELP: &str = "Total number of adds handled by workqueue";
const QUEUE_DURATION_HELP: &str =
    "How long in seconds an item stays in workqueue before being requested.";
const WORK_DURATION_HELP: &str = "How long in seconds processing an item from workqueue takes.";
const UNFINISHED_HELP: &str = "How many seconds of work has done that is in progress and hasn't \
     been observed by work_duration. Large values indicate stuck threads. One can deduce the \
     number of stuck threads by observing the rate at which this increases.";
const LONGEST_HELP: &str =
    "How many seconds has the longest running processor for workqueue been running.";
const RETRIES_HELP: &str = "Total number of retries handled by workqueue";

/// The seven families; clones share their series.
#[derive(Clone)]
struct Families {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    queue_duration: Family<Labels, Histogram, Buckets>,
    work_duration: Family<Labels, Histogram, Buckets>,
    unfinished: Family<Labels, Gauge<f64, AtomicU64>>,
    longest: Family<Labels, Gauge<f64, AtomicU64>>,
    retries: Family<Labels, Counter>,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(Buckets),
            work_duration: Family::new_with_constructor(Buckets),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
        }
    }
}

impl fmt::Debug for Families {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Families").finish_non_exhaustive()
    }
}

fn encode_family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    family: &impl EncodeMetric,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // Counters are named without `_total` here: the encoder appends it to their samples.
        encode_family(&mut encoder, "workqueue_depth", DEPTH_HELP, &self.depth)?;
        encode_family(&mut encoder, "workqueue_adds", ADDS_HELP, &self.adds)?;
        encode_family(
            &mut encoder,
            "workqueue_queue_duration_seconds",
            QUEUE_DURATION_HELP,
            &self.queue_duration,
        )?;
        encode_family(
            &mut encoder,
            "workqueue_work_duration_seconds",
            WORK_DURATION_HELP,
            &self.work_duration,
        )?;
        encode_family(
            &mut encoder,
            "workqueue_unfinished_work_seconds",
            UNFINISHED_HELP,
            &self.unfinished,
        )?;
        encode_family(
            &mut encoder,
            "workqueue_longest_running_processor_seconds",
            LONGEST_HELP,
            &self.longest,
        )?;
        encode_family(
            &mut encoder,
            "workqueue_retries",
            RETRIES_HELP,
            &self.retries,
        )
    }
}

/// The seven metric families, registered once; every queue built with this provider reports
/// under its own `name` label.
pub struct QueueMetrics {
    families: Families,
    priorities: Mutex<HashMap<String, HashSet<i32>>>,
}

impl fmt::Debug for QueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueMetrics").finish_non_exhaustive()
    }
}

impl QueueMetrics {
    /// Registers the seven families in `registry` and returns the provider to give queues
    /// ([`WorkQueue`](crate::WorkQueue) and [`PriorityQueue`](crate::PriorityQueue) builders'
    /// `metrics`). Register once per registry: the names are fixed.
    ///
    /// # Examples
    ///
    /// See the [module documentation](self).
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let families = Families::default();
        registry.register_collector(Box::new(families.clone()));
        Arc::new(Self {
            families,
            priorities: Mutex::new(HashMap::new()),
        })
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

impl MetricsProvider for QueueMetrics {
    fn depth(&self, n: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(PGauge(self.families.depth.get_or_create(&name(n)).clone()))
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
        Arc::new(PGauge(self.families.depth.get_or_create(&labels).clone()))
    }

    fn adds(&self, n: &str) -> Arc<dyn CounterMetric> {
        Arc::new(PCounter(self.families.adds.get_or_create(&name(n)).clone()))
    }

    fn queue_duration(&self, n: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(PHistogram(
            self.families.queue_duration.get_or_create(&name(n)).clone(),
        ))
    }

    fn work_duration(&self, n: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(PHistogram(
            self.families.work_duration.get_or_create(&name(n)).clone(),
        ))
    }

    fn unfinished_work_seconds(&self, n: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(PSettable(
            self.families.unfinished.get_or_create(&name(n)).clone(),
        ))
    }

    fn longest_running_processor_seconds(&self, n: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(PSettable(
            self.families.longest.get_or_create(&name(n)).clone(),
        ))
    }

    fn retries(&self, n: &str) -> Arc<dyn CounterMetric> {
        Arc::new(PCounter(
            self.families.retries.get_or_create(&name(n)).clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_types_only() {
        let metrics = QueueMetrics::register(&mut Registry::default());
        assert_eq!(format!("{metrics:?}"), "QueueMetrics { .. }");
        assert_eq!(format!("{:?}", Families::default()), "Families { .. }");
    }

    #[test]
    fn the_bounds_are_gos_products() {
        let bounds = go_exponential_buckets(1e-6, 10.0, 10);
        assert_eq!(bounds.len(), 10);
        assert_eq!((bounds[0], bounds[5], bounds[9]), (1e-6, 0.1, 1000.0));
        assert_eq!(bounds[1], 1e-6 * 10.0, "one product per step, not 1e-5");
    }
}
