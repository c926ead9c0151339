//! controller-runtime's reconcile metrics in a `prometheus-client` registry, under the names,
//! labels and buckets its dashboards read (feature `prometheus`).
//!
//! | name | type | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` |
//! | `controller_runtime_reconcile_timeouts_total` | counter | `controller` (reconciles dropped at their [hard deadline](crate::Controller::hard_deadline)) |
//! | `controller_runtime_reconcile_time_seconds` | histogram (5 ms … 60 s) | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//! | `ctrlq_controller_shards_held` | gauge | `controller` (sharded: the shards this replica leads) |
//! | `ctrlq_controller_shards_unowned` | gauge | `controller` (sharded: the shards held by no replica at this replica's last look, [`Event::ShardsUnowned`]) |
//! | `ctrlq_controller_shards_unowned_seconds` | gauge | `controller` (sharded: how long the one unowned longest has been so) |
//! | `ctrlq_controller_shard_selector_ignored_total` | counter | `controller` (sharded: lists of a shard the API server did not filter, [`Event::ShardSelectorIgnored`]) |
//! | `ctrlq_controller_shard_moves_total` | counter | `controller` (sharded: shards that came to this replica) |
//! | `ctrlq_controller_first_reconcile_seconds` | histogram (5 ms … 60 s) | `controller` (per term: the time from winning the lease or the shard to the first reconcile, [`Event::FirstReconcile`]) |
//! | `ctrlq_controller_source_errors_total` | counter | `controller`, `source` (the source's position, from 0: the error items it yielded, [`Event::SourceError`], a watcher's errors among them) |
//! | `ctrlq_controller_source_failures_total` | counter | `controller`, `source` (the times it failed and was subscribed again, [`Event::SourceFailed`]) |
//! | `ctrlq_controller_reconcile_overruns_total` | counter | `controller` (reconciles that ran past a deadline that could not cut them, [`Event::ReconcileOverran`]) |
//!
//! As in controller-runtime, a panic counts as a panic, as an error and as a reconcile with
//! result `error`, and so does a timeout (as a timeout); every series of a controller exists (at zero) from its first term. The
//! feature also turns on the metrics that sit next to these: the queue's and the elector's,
//! `leader_election_master_status` among them ([`ctrlq_leader::prometheus::LeaderMetrics`],
//! given to [`LeaderElector::metrics`](ctrlq_leader::LeaderElector::metrics)).
//!
//! # The queue's metrics
//!
//! Registered with
//! [`QueueMetrics::register_controller_runtime`](ctrlq_queue_async::prometheus::QueueMetrics::register_controller_runtime)
//! and given to [`Controller::queue_metrics`](crate::Controller::queue_metrics), which hands
//! them to each term's queue, the controller's queue writes the `workqueue_*` series as a
//! controller-runtime operator's (v0.24, `pkg/internal/metrics/workqueue.go`): each one
//! labelled `controller` and `name`, both the controller's name, the depth also `priority`
//! (the runner's queue is a priority queue, as controller-runtime's: `priority="0"` for live
//! changes, `priority="-100"` for keys from a listing; see [`priority`](crate::priority)), with
//! its help texts and its duration buckets, `ExponentialBuckets(10e-9, 10, 12)` (10 ns …
//! 1000 s):
//!
//! | name | type | labels |
//! |---|---|---|
//! | `workqueue_depth` | gauge | `controller`, `name`, `priority` |
//! | `workqueue_adds_total` | counter | `controller`, `name` |
//! | `workqueue_queue_duration_seconds` | histogram (10 ns … 1000 s) | `controller`, `name` |
//! | `workqueue_work_duration_seconds` | histogram (10 ns … 1000 s) | `controller`, `name` |
//! | `workqueue_unfinished_work_seconds` | gauge | `controller`, `name` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `controller`, `name` |
//! | `workqueue_retries_total` | counter | `controller`, `name` |
//! | `ctrlq_workqueue_oldest_wait_seconds` | gauge | `controller`, `name`, `priority` (ctrlq's: how long the oldest key of each priority has waited; a listed key's stays under the [aging bound](crate::priority)) |
//!
//! [`QueueMetrics::register`](ctrlq_queue_async::prometheus::QueueMetrics::register) writes
//! them as Kubernetes components do instead (label `name` only, component-base's help texts and
//! buckets); one registry holds one of the two. What each series counts is described in
//! [`ctrlq_queue_async::prometheus`].
//!
//! The help texts are controller-runtime's, verbatim (no period added), and ours are written in
//! their style: `ctrlq_controller_first_reconcile_seconds` reads "Time from gaining a lease or a
//! shard to the first reconcile of the term per controller". Both histograms have
//! controller-runtime's reconcile time buckets. A term that ends before it reconciles anything
//! (a follower's source yielded no key yet, a lease lost at once) observes nothing.
//!
//! # Serving
//!
//! Render the registry with [`encode`] (the queue crate's, re-exported here): it writes each
//! histogram bucket's bound as Go's client writes it (`le="1"`, where `prometheus-client`'s own
//! `text::encode` writes `le="1.0"`), so that queries selecting a bucket by `le` as written
//! against controller-runtime's series find these. Serve the text with the content type
//! [`CONTENT_TYPE`], `application/openmetrics-text; version=1.0.0; charset=utf-8`: it is the
//! OpenMetrics text format, ending with `# EOF`.
//!
//! The three crates speak one vocabulary: each one's metrics are a `prometheus::<Subject>Metrics`
//! type whose `register(&mut Registry)` returns an `Arc<Self>`, attached with a `metrics` method
//! on what they measure (the queue builder, the elector, the controller).
//!
//! # Examples
//!
//! ```
//! use std::convert::Infallible;
//! use ctrlq_controller::{Action, Context, Controller};
//! use ctrlq_controller::prometheus::ControllerMetrics;
//! use ctrlq_queue_async::prometheus::QueueMetrics;
//! use prometheus_client::registry::Registry;
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let mut registry = Registry::default();
//! let metrics = ControllerMetrics::register(&mut registry);
//! let queue_metrics = QueueMetrics::register_controller_runtime(&mut registry);
//! let shutdown = CancellationToken::new();
//! let stop = shutdown.clone();
//! let summary = Controller::new("pods", move |_key: u32, _ctx: Context| {
//!         stop.cancel();
//!         async { Ok::<_, Infallible>(Action::Done) }
//!     })
//!     .source(|| futures::stream::iter([1]))
//!     .metrics(metrics)
//!     .queue_metrics(queue_metrics)
//!     .run(shutdown)
//!     .await;
//! assert_eq!(summary.reconciles, 1);
//!
//! let mut text = String::new();
//! ctrlq_controller::prometheus::encode(&mut text, &registry).unwrap();
//! assert!(text.contains(
//!     r#"controller_runtime_reconcile_total{controller="pods",result="success"} 1"#
//! ));
//! assert!(text.contains(
//!     r#"controller_runtime_reconcile_time_seconds_bucket{le="1",controller="pods"} 1"#
//! ));
//! assert!(text.contains(r#"workqueue_adds_total{controller="pods",name="pods"} 1"#));
//! assert!(text.contains(r#"workqueue_depth{controller="pods",name="pods",priority="0"} 0"#));
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::{Action, Event, ReconcileOutcome};

pub use ctrlq_queue_async::prometheus::{CONTENT_TYPE, encode};

type Labels = Vec<(&'static str, String)>;

/// controller-runtime's reconcile time buckets, in seconds.
const BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

#[derive(Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(BUCKETS)
    }
}

/// The reconcile metric families, registered once; every controller given them reports under
/// its own `controller` label. Clones share their series.
#[derive(Clone)]
pub struct ControllerMetrics {
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    panics: Family<Labels, Counter>,
    timeouts: Family<Labels, Counter>,
    overruns: Family<Labels, Counter>,
    time: Family<Labels, Histogram, Buckets>,
    max_concurrent: Family<Labels, Gauge>,
    active: Family<Labels, Gauge>,
    shards_held: Family<Labels, Gauge>,
    shards_unowned: Family<Labels, Gauge>,
    shards_unowned_seconds: Family<Labels, Gauge<f64, AtomicU64>>,
    selector_ignored: Family<Labels, Counter>,
    shard_moves: Family<Labels, Counter>,
    first_reconcile: Family<Labels, Histogram, Buckets>,
    source_errors: Family<Labels, Counter>,
    source_failures: Family<Labels, Counter>,
}

impl Collector for ControllerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // Counters are named without `_total` here: the encoder appends it to their samples.
        // The help texts are controller-runtime's (`pkg/internal/controller/metrics`), verbatim,
        // and ours in the same style: the collector writes them as they are (a registry's
        // `register` would add a period to each).
        let families: [(&str, &str, &dyn EncodeMetric); 16] = [
            (
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                &self.total,
            ),
            (
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                &self.errors,
            ),
            (
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
                &self.panics,
            ),
            (
                "controller_runtime_reconcile_timeouts",
                "Total number of reconciliation timeouts per controller",
                &self.timeouts,
            ),
            (
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                &self.time,
            ),
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                &self.max_concurrent,
            ),
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                &self.active,
            ),
            (
                "ctrlq_controller_shards_held",
                "Number of shards this replica leads per sharded controller",
                &self.shards_held,
            ),
            (
                "ctrlq_controller_shards_unowned",
                "Number of shards held by no replica at this replica's last look per sharded controller",
                &self.shards_unowned,
            ),
            (
                "ctrlq_controller_shards_unowned_seconds",
                "Time the shard unowned longest has been held by no replica per sharded controller",
                &self.shards_unowned_seconds,
            ),
            (
                "ctrlq_controller_shard_selector_ignored",
                "Total number of lists of a shard the API server did not filter by its shard selector per sharded controller",
                &self.selector_ignored,
            ),
            (
                "ctrlq_controller_shard_moves",
                "Total number of shards that came to this replica per sharded controller",
                &self.shard_moves,
            ),
            (
                "ctrlq_controller_first_reconcile_seconds",
                "Time from gaining a lease or a shard to the first reconcile of the term per controller",
                &self.first_reconcile,
            ),
            (
                "ctrlq_controller_source_errors",
                "Total number of errors yielded per controller and source",
                &self.source_errors,
            ),
            (
                "ctrlq_controller_source_failures",
                "Total number of source failures followed by a new subscription per controller and source",
                &self.source_failures,
            ),
            (
                "ctrlq_controller_reconcile_overruns",
                "Total number of reconciliations that ran past a deadline that could not cut them per controller",
                &self.overruns,
            ),
        ];
        for (name, help, family) in families {
            family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)?;
        }
        Ok(())
    }
}

/// Every family a controller process reports, registered in one call: controller-runtime's
/// reconcile families ([`ControllerMetrics`]) and work-queue families
/// ([`QueueMetrics::register_controller_runtime`](ctrlq_queue_async::prometheus::QueueMetrics::register_controller_runtime)),
/// and client-go's leader-election families ([`LeaderMetrics`](ctrlq_leader::prometheus::LeaderMetrics)).
/// Register once per registry; give it to each controller with
/// [`Controller::prometheus`](crate::Controller::prometheus), which wires all three, its
/// elector's included.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::prometheus::Metrics;
/// let mut registry = prometheus_client::registry::Registry::default();
/// let metrics = Metrics::register(&mut registry);
/// let mut text = String::new();
/// ctrlq_controller::prometheus::encode(&mut text, &registry).unwrap();
/// assert!(text.contains("# HELP leader_election_master_status"));
/// # let _ = metrics;
/// ```
#[derive(Debug, Clone)]
pub struct Metrics {
    /// controller-runtime's reconcile families.
    pub controller: Arc<ControllerMetrics>,
    /// controller-runtime's work-queue families.
    pub queue: Arc<ctrlq_queue_async::prometheus::QueueMetrics>,
    /// client-go's leader-election families.
    pub leader: Arc<ctrlq_leader::prometheus::LeaderMetrics>,
}

impl Metrics {
    /// Registers the three in `registry`.
    ///
    /// # Examples
    ///
    /// See [`Metrics`].
    pub fn register(registry: &mut Registry) -> Self {
        Self {
            controller: ControllerMetrics::register(registry),
            queue: ctrlq_queue_async::prometheus::QueueMetrics::register_controller_runtime(
                registry,
            ),
            leader: ctrlq_leader::prometheus::LeaderMetrics::register(registry),
        }
    }
}

impl ControllerMetrics {
    /// Registers the families in `registry` and returns the handle to give controllers
    /// ([`Controller::metrics`](crate::Controller::metrics)). Register once per registry: the
    /// names are fixed.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// let _metrics = ctrlq_controller::prometheus::ControllerMetrics::register(&mut registry);
    /// ```
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self {
            total: Family::default(),
            errors: Family::default(),
            panics: Family::default(),
            timeouts: Family::default(),
            overruns: Family::default(),
            time: Family::new_with_constructor(Buckets),
            max_concurrent: Family::default(),
            active: Family::default(),
            shards_held: Family::default(),
            shards_unowned: Family::default(),
            shards_unowned_seconds: Family::default(),
            selector_ignored: Family::default(),
            shard_moves: Family::default(),
            first_reconcile: Family::new_with_constructor(Buckets),
            source_errors: Family::default(),
            source_failures: Family::default(),
        };
        registry.register_collector(Box::new(metrics.clone()));
        Arc::new(metrics)
    }

    /// Records `event` of the controller `name`, which runs `workers` workers per term.
    pub(crate) fn record<K>(&self, name: &str, workers: usize, event: &Event<'_, K>) {
        let l = labels(name);
        match event {
            // As controller-runtime does when a controller starts, every series is created at
            // zero, so that dashboards see them before the first failure.
            Event::Leading { .. } => {
                let n = i64::try_from(workers).unwrap_or(i64::MAX);
                self.max_concurrent.get_or_create(&l).set(n);
                let _ = self.active.get_or_create(&l);
                let _ = self.errors.get_or_create(&l);
                let _ = self.panics.get_or_create(&l);
                let _ = self.timeouts.get_or_create(&l);
                let _ = self.overruns.get_or_create(&l);
                let _ = self.first_reconcile.get_or_create(&l);
                for result in ["success", "error", "requeue", "requeue_after"] {
                    let _ = self.total.get_or_create(&with_result(&l, result));
                }
            }
            Event::ReconcileStarted { .. } => {
                self.active.get_or_create(&l).inc();
            }
            Event::ReconcileFinished { outcome, took, .. } => {
                self.active.get_or_create(&l).dec();
                let result = match outcome {
                    ReconcileOutcome::Ok(Action::Done) => "success",
                    ReconcileOutcome::Ok(Action::RequeueRateLimited) => "requeue",
                    ReconcileOutcome::Ok(Action::RequeueAfter(_) | Action::Requeue { .. }) => {
                        "requeue_after"
                    }
                    ReconcileOutcome::Error(_)
                    | ReconcileOutcome::Panic(_)
                    | ReconcileOutcome::TimedOut(_) => "error",
                    ReconcileOutcome::Aborted => return,
                };
                match outcome {
                    ReconcileOutcome::Panic(_) => self.panics.get_or_create(&l).inc(),
                    ReconcileOutcome::TimedOut(_) => self.timeouts.get_or_create(&l).inc(),
                    _ => 0,
                };
                if result == "error" {
                    self.errors.get_or_create(&l).inc();
                }
                self.time.get_or_create(&l).observe(took.as_secs_f64());
                self.total.get_or_create(&with_result(&l, result)).inc();
            }
            Event::FirstReconcile { after, .. } => {
                let first = self.first_reconcile.get_or_create(&l);
                first.observe(after.as_secs_f64());
            }
            Event::ShardLeading { .. } => {
                self.shards_held.get_or_create(&l).inc();
                self.shard_moves.get_or_create(&l).inc();
            }
            Event::ShardEnded { .. } => {
                self.shards_held.get_or_create(&l).dec();
            }
            Event::ShardSelectorIgnored { .. } => {
                self.selector_ignored.get_or_create(&l).inc();
            }
            Event::ShardsUnowned { shards, longest } => {
                let count = i64::try_from(shards.len()).unwrap_or(i64::MAX);
                self.shards_unowned.get_or_create(&l).set(count);
                let seconds = self.shards_unowned_seconds.get_or_create(&l);
                seconds.set(longest.as_secs_f64());
            }
            Event::SourceError { source, .. } => {
                let l = with_label(&l, "source", source.to_string());
                self.source_errors.get_or_create(&l).inc();
            }
            Event::SourceFailed { source, .. } => {
                let l = with_label(&l, "source", source.to_string());
                self.source_failures.get_or_create(&l).inc();
            }
            Event::ReconcileOverran { .. } => {
                self.overruns.get_or_create(&l).inc();
            }
            _ => {}
        }
    }
}

fn with_result(l: &Labels, result: &str) -> Labels {
    with_label(l, "result", result.to_owned())
}

fn with_label(l: &Labels, name: &'static str, value: String) -> Labels {
    let mut l = l.clone();
    l.push((name, value));
    l
}

fn labels(name: &str) -> Labels {
    vec![("controller", name.to_owned())]
}

impl fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerMetrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_type_alone() {
        let metrics = ControllerMetrics::register(&mut Registry::default());
        assert_eq!(format!("{metrics:?}"), "ControllerMetrics { .. }");
    }
}
