//! client-go's work-queue metrics in a `prometheus-client` registry, under the names, labels,
//! help texts and bucket bounds Kubernetes dashboards already read (feature `prometheus`): as
//! Kubernetes components write them ([`QueueMetrics::register`]), or as controller-runtime
//! writes them ([`QueueMetrics::register_controller_runtime`], for a controller's queue).
//!
//! | name | type | labels (`register`) | labels (`register_controller_runtime`) |
//! |---|---|---|---|
//! | `workqueue_depth` | gauge | `name`; `name`, `priority` for priority queues | `controller`, `name`, `priority` |
//! | `workqueue_adds_total` | counter | `name` | `controller`, `name` |
//! | `workqueue_queue_duration_seconds` | histogram | `name` | `controller`, `name` |
//! | `workqueue_work_duration_seconds` | histogram | `name` | `controller`, `name` |
//! | `workqueue_unfinished_work_seconds` | gauge | `name` | `controller`, `name` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name` | `controller`, `name` |
//! | `workqueue_retries_total` | counter | `name` | `controller`, `name` |
//! | `ctrlq_workqueue_oldest_wait_seconds` | gauge | `name`, `priority` (priority queues) | `controller`, `name`, `priority` |
//!
//! The last one is ctrlq's (neither client-go nor controller-runtime has it), written once a
//! priority queue reports to the registry (so a registry of work queues writes exactly the Go
//! definitions): how long the oldest key of each priority has waited to be handed out,
//! refreshed with the unfinished-work gauges. Beside `workqueue_depth{priority}` it shows whether low priorities are served: a
//! controller's listed keys wait at most the aging bound (`ctrlq_controller::priority`).
//!
//! `register` follows component-base (`k8s.io/component-base/metrics/prometheus/workqueue`),
//! which client-go's queues report to in every Kubernetes component. `register_controller_runtime`
//! follows controller-runtime v0.24 (`pkg/internal/metrics/workqueue.go`), which an operator's
//! queues report to: `controller` and `name` are both the queue's name (a controller's queue
//! is named after the controller), and a work queue's depth is labelled `priority="0"`, as
//! controller-runtime's priority queue, its controllers' default, labels a key added without a
//! priority.
//!
//! - **Help texts** are the Go `Help` strings, verbatim, each definition its own: component-base's
//!   depth reads "Current depth of workqueue", controller-runtime's "Current depth of workqueue
//!   by workqueue and priority". (Kubernetes components render component-base's with a
//!   `[BETA] ` stability prefix, which this module leaves out, as controller-runtime does.)
//! - **Histogram bounds** are component-base's `ExponentialBuckets(10e-7, 10, 10)` or
//!   controller-runtime's `ExponentialBuckets(10e-9, 10, 12)`, computed as Go computes them
//!   (each bound the previous one times 10, in `f64`), so every bound is the same
//!   floating-point number as Go's: `1e-06`, `9.999999999999999e-06`, `9.999999999999999e-05`,
//!   `0.001`, `0.01`, `0.1`, `1`, `10`, `100`, `1000`; controller-runtime's start with `1e-08`,
//!   `1e-07` before those ten. An observation equal to a bound counts in that bucket (`le`), so
//!   `0.1` s counts in `le="0.1"`.
//! - **Labels** are written in the order Go's client writes them, sorted by name (`controller`,
//!   `name`, `priority`), except a bucket's `le`, which comes first here and last in Go's: the
//!   same series to Prometheus.
//! - **Bucket labels** are written by [`encode`] as Go's client writes them (`le="1"`,
//!   `le="9.999999999999999e-06"`). `prometheus-client`'s own `text::encode` writes `le="1.0"`
//!   and `le="0.000009999999999999999"`: the same numbers, but a label value is a string, so a
//!   query or recording rule that selects a bucket by `le` as written against client-go's series
//!   finds no series in that rendering.
//! - **Counters** are written in the OpenMetrics text format `prometheus-client` produces: the
//!   samples are `workqueue_adds_total` and `workqueue_retries_total` as Go's, and the `# HELP`
//!   and `# TYPE` lines name the family without its `_total`.
//!
//! # Serving
//!
//! Render the registry with [`encode`] and serve the text with the content type
//! [`CONTENT_TYPE`], `application/openmetrics-text; version=1.0.0; charset=utf-8`: it is the
//! OpenMetrics text format (counter families named without `_total`, a closing `# EOF`), which
//! a scraper told it is Prometheus's older text format misreads.
//!
//! # What the metrics count
//!
//! What each metric counts is described in [`metrics`](crate::metrics). In particular
//! `workqueue_retries_total` counts as client-go's for a [`WorkQueue`](crate::WorkQueue): every
//! delayed or rate-limited add the queue accepts, a zero delay included; and as
//! controller-runtime's for a [`PriorityQueue`](crate::PriorityQueue): only adds whose delay is
//! above zero, whichever definitions are registered (controller-runtime's help text speaks of
//! a non-zero delay; its controllers on client-go's queue, `UsePriorityQueue: false`, count a
//! zero delay too, as a work queue here does). `workqueue_unfinished_work_seconds` and
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
//! ctrlq_queue_async::prometheus::encode(&mut text, &registry).unwrap();
//! assert!(text.contains(r#"workqueue_adds_total{name="pods"} 1"#));
//! assert!(text.contains(r#"workqueue_depth{name="pods"} 1"#));
//! assert!(text.contains("# HELP workqueue_depth Current depth of workqueue\n"));
//! assert!(text.ends_with("# EOF\n"));
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

mod encode;

pub use encode::{CONTENT_TYPE, encode};

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

/// Whose definitions the families follow: the names are the same, the labels, help texts and
/// histogram bounds differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    /// component-base's (`k8s.io/component-base/metrics/prometheus/workqueue`): label `name`.
    ClientGo,
    /// controller-runtime's (`pkg/internal/metrics/workqueue.go`): labels `controller` and
    /// `name`, both the queue's name, and `priority` on the depth.
    ControllerRuntime,
}

impl Flavour {
    /// The help texts of the eight families, in [`Families`]' order, verbatim: the collector
    /// writes them as they are (a registry's `register` would add a period to each). The last
    /// is ctrlq's own.
    fn help(self) -> [&'static str; 8] {
        match self {
            Self::ClientGo => [
                "Current depth of workqueue",
                "Total number of adds handled by workqueue",
                "How long in seconds an item stays in workqueue before being requested.",
                "How long in seconds processing an item from workqueue takes.",
                "How many seconds of work has done that is in progress and hasn't been observed \
                 by work_duration. Large values indicate stuck threads. One can deduce the \
                 number of stuck threads by observing the rate at which this increases.",
                "How many seconds has the longest running processor for workqueue been running.",
                "Total number of retries handled by workqueue",
                OLDEST_WAIT_HELP,
            ],
            Self::ControllerRuntime => [
                "Current depth of workqueue by workqueue and priority",
                "Total number of adds handled by workqueue",
                "How long in seconds an item stays in workqueue before being requested",
                "How long in seconds processing an item from workqueue takes.",
                "How many seconds of work has been done that is in progress and hasn't been \
                 observed by work_duration. Large values indicate stuck threads. One can deduce \
                 the number of stuck threads by observing the rate at which this increases.",
                "How many seconds has the longest running processor for workqueue been running.",
                "Total number of items added to the workqueue with a non-zero delay (rate-limited \
                 requeues, explicit RequeueAfter or AddAfter calls)",
                OLDEST_WAIT_HELP,
            ],
        }
    }

    /// A new duration histogram: component-base's `ExponentialBuckets(10e-7, 10, 10)`, 1 µs …
    /// 1000 s, or controller-runtime's `ExponentialBuckets(10e-9, 10, 12)`, 10 ns … 1000 s.
    fn histogram(self) -> fn() -> Histogram {
        match self {
            Self::ClientGo => || Histogram::new(go_exponential_buckets(1e-6, 10.0, 10)),
            Self::ControllerRuntime => || Histogram::new(go_exponential_buckets(1e-8, 10.0, 12)),
        }
    }

    /// The labels of queue `name`'s series, in the order Go's client writes them (sorted by
    /// name), `priority` last.
    fn labels(self, name: &str, priority: Option<String>) -> Labels {
        let mut labels = Vec::with_capacity(3);
        if self == Self::ControllerRuntime {
            labels.push(("controller".to_owned(), name.to_owned()));
        }
        labels.push(("name".to_owned(), name.to_owned()));
        labels.extend(priority.map(|p| ("priority".to_owned(), p)));
        labels
    }
}

/// The help text of `ctrlq_workqueue_oldest_wait_seconds`, in the style of client-go's.
const OLDEST_WAIT_HELP: &str = "How many seconds the oldest item of each priority has waited in workqueue before being requested";

type Durations = Family<Labels, Histogram, fn() -> Histogram>;
type Seconds = Gauge<f64, AtomicU64>;

/// The eight families of one flavour; clones share their series.
#[derive(Clone)]
struct Families {
    flavour: Flavour,
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    queue_duration: Durations,
    work_duration: Durations,
    unfinished: Family<Labels, Seconds>,
    longest: Family<Labels, Seconds>,
    retries: Family<Labels, Counter>,
    oldest_wait: Family<Labels, Seconds>,
    /// Whether a priority queue reported its oldest waits: until then the family is not
    /// written, so that the exposition of work queues is exactly the Go definitions'.
    oldest_wait_used: Arc<AtomicBool>,
}

impl Families {
    fn new(flavour: Flavour) -> Self {
        Self {
            flavour,
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(flavour.histogram()),
            work_duration: Family::new_with_constructor(flavour.histogram()),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
            oldest_wait: Family::default(),
            oldest_wait_used: Arc::default(),
        }
    }
}

impl fmt::Debug for Families {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Families").finish_non_exhaustive()
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // Counters are named without `_total`: the encoder appends it to their samples.
        let families: [(&str, &dyn EncodeMetric); 8] = [
            ("workqueue_depth", &self.depth),
            ("workqueue_adds", &self.adds),
            ("workqueue_queue_duration_seconds", &self.queue_duration),
            ("workqueue_work_duration_seconds", &self.work_duration),
            ("workqueue_unfinished_work_seconds", &self.unfinished),
            ("workqueue_longest_running_processor_seconds", &self.longest),
            ("workqueue_retries", &self.retries),
            ("ctrlq_workqueue_oldest_wait_seconds", &self.oldest_wait),
        ];
        let used = if self.oldest_wait_used.load(Ordering::Relaxed) {
            families.len()
        } else {
            families.len() - 1
        };
        for ((name, family), help) in families.into_iter().zip(self.flavour.help()).take(used) {
            family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)?;
        }
        Ok(())
    }
}

/// The eight metric families, registered once; every queue built with this provider reports
/// under its own `name` label (and `controller` label, when registered with
/// [`register_controller_runtime`](Self::register_controller_runtime)).
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
    /// Registers the eight families in `registry` as component-base defines them (client-go's
    /// queues in Kubernetes components) and returns the provider to give queues
    /// ([`WorkQueue`](crate::WorkQueue) and [`PriorityQueue`](crate::PriorityQueue) builders'
    /// `metrics`). Register once per registry, with this or
    /// [`register_controller_runtime`](Self::register_controller_runtime): the names are fixed.
    ///
    /// # Examples
    ///
    /// See the [module documentation](self).
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        Self::register_flavour(registry, Flavour::ClientGo)
    }

    /// Registers the eight families in `registry` as controller-runtime defines them, and
    /// returns the provider to give a controller's queue (`Controller::queue_metrics` in
    /// `ctrlq-controller`) or any other queue. Each series is labelled `controller` and `name`,
    /// both the queue's name; the depth is also labelled `priority`, `"0"` for a work queue,
    /// whose keys have no priority, as controller-runtime's priority queue labels a key added
    /// without one. The duration histograms have controller-runtime's bounds,
    /// `ExponentialBuckets(10e-9, 10, 12)` (10 ns … 1000 s), and the help texts are its own.
    /// Register once per registry, with this or [`register`](Self::register): the names are
    /// fixed.
    ///
    /// # Examples
    ///
    /// ```
    /// use prometheus_client::registry::Registry;
    /// use ctrlq_queue_async::WorkQueue;
    /// use ctrlq_queue_async::prometheus::{QueueMetrics, encode};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut registry = Registry::default();
    /// let metrics = QueueMetrics::register_controller_runtime(&mut registry);
    /// let queue = WorkQueue::builder().name("pods").metrics(metrics).build();
    /// queue.add("ns/a").unwrap();
    /// queue.get().await.unwrap().done();
    ///
    /// let mut text = String::new();
    /// encode(&mut text, &registry).unwrap();
    /// assert!(text.contains(r#"workqueue_adds_total{controller="pods",name="pods"} 1"#));
    /// assert!(text.contains(r#"workqueue_depth{controller="pods",name="pods",priority="0"} 0"#));
    /// assert!(text.contains(
    ///     r#"workqueue_work_duration_seconds_bucket{le="1e-08",controller="pods",name="pods"} 1"#
    /// ));
    /// # }
    /// ```
    pub fn register_controller_runtime(registry: &mut Registry) -> Arc<Self> {
        Self::register_flavour(registry, Flavour::ControllerRuntime)
    }

    fn register_flavour(registry: &mut Registry, flavour: Flavour) -> Arc<Self> {
        let families = Families::new(flavour);
        registry.register_collector(Box::new(families.clone()));
        Arc::new(Self {
            families,
            priorities: Mutex::new(HashMap::new()),
        })
    }

    /// The `priority` label of queue `name`: the priority, or `exceeded_cardinality_limit`
    /// after [`MAX_PRIORITY_LABELS`] distinct ones.
    fn priority_label(&self, name: &str, priority: i32) -> String {
        let mut seen = self.priorities.lock();
        let set = seen.entry(name.to_owned()).or_default();
        if set.contains(&priority) || set.len() < MAX_PRIORITY_LABELS {
            set.insert(priority);
            priority.to_string()
        } else {
            "exceeded_cardinality_limit".to_owned()
        }
    }

    /// The series of queue `name` (and `priority`) in `family`.
    fn series<M: Clone, C: MetricConstructor<M>>(
        &self,
        family: &Family<Labels, M, C>,
        name: &str,
        priority: Option<String>,
    ) -> M {
        family.get_or_create_owned(&self.families.flavour.labels(name, priority))
    }
}

impl GaugeMetric for Gauge {
    fn inc(&self) {
        Gauge::inc(self);
    }
    fn dec(&self) {
        Gauge::dec(self);
    }
}

impl CounterMetric for Counter {
    fn inc(&self) {
        Counter::inc(self);
    }
}

impl HistogramMetric for Histogram {
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

impl SettableGaugeMetric for Seconds {
    fn set(&self, value: f64) {
        Gauge::set(self, value);
    }
}

impl MetricsProvider for QueueMetrics {
    fn depth(&self, name: &str) -> Arc<dyn GaugeMetric> {
        match self.families.flavour {
            Flavour::ClientGo => Arc::new(self.series(&self.families.depth, name, None)),
            // controller-runtime's priority queue, its controllers' default, writes a key added
            // without a priority as `priority="0"`.
            Flavour::ControllerRuntime => self.depth_for_priority(name, 0),
        }
    }

    fn depth_for_priority(&self, name: &str, priority: i32) -> Arc<dyn GaugeMetric> {
        let label = self.priority_label(name, priority);
        Arc::new(self.series(&self.families.depth, name, Some(label)))
    }

    fn adds(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(self.series(&self.families.adds, name, None))
    }

    fn queue_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(self.series(&self.families.queue_duration, name, None))
    }

    fn work_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(self.series(&self.families.work_duration, name, None))
    }

    fn unfinished_work_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(self.series(&self.families.unfinished, name, None))
    }

    fn longest_running_processor_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(self.series(&self.families.longest, name, None))
    }

    fn retries(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(self.series(&self.families.retries, name, None))
    }

    fn oldest_wait_for_priority(&self, name: &str, priority: i32) -> Arc<dyn SettableGaugeMetric> {
        let label = self.priority_label(name, priority);
        self.families
            .oldest_wait_used
            .store(true, Ordering::Relaxed);
        Arc::new(self.series(&self.families.oldest_wait, name, Some(label)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_types_only() {
        let metrics = QueueMetrics::register(&mut Registry::default());
        assert_eq!(format!("{metrics:?}"), "QueueMetrics { .. }");
        assert_eq!(
            format!("{:?}", Families::new(Flavour::ClientGo)),
            "Families { .. }"
        );
    }

    #[test]
    fn the_bounds_are_gos_products() {
        let bounds = go_exponential_buckets(1e-6, 10.0, 10);
        assert_eq!(bounds.len(), 10);
        assert_eq!((bounds[0], bounds[5], bounds[9]), (1e-6, 0.1, 1000.0));
        assert_eq!(bounds[1], 1e-6 * 10.0, "one product per step, not 1e-5");
    }

    #[test]
    fn controller_runtimes_bounds_run_from_ten_nanoseconds_to_a_thousand_seconds() {
        let bounds = go_exponential_buckets(10e-9, 10.0, 12);
        assert_eq!(bounds.len(), 12);
        assert_eq!((bounds[0], bounds[8], bounds[11]), (1e-8, 1.0, 1000.0));
        assert_eq!(bounds[3], 1e-8 * 10.0 * 10.0 * 10.0, "Go's products");
    }
}
