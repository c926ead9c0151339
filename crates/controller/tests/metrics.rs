//! controller-runtime's metrics against the reconciles observed through the event hook, and the
//! controller's queue series as controller-runtime writes them.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::prometheus::ControllerMetrics;
use ctrlq_controller::prometheus::encode;
use ctrlq_controller::{Action, Context, Controller, Event, ReconcileOutcome};
use ctrlq_queue_async::prometheus::QueueMetrics;
use futures::StreamExt;
use prometheus_client::registry::Registry;
use support::{Rng, bounded};
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
struct Failed;

fn value(text: &str, series: &str) -> f64 {
    support::series_value(text, series)
}

/// Seeded outcomes (ok, requeue, requeue after, error, panic) for 40 keys: every counter equals
/// what the event hook saw, the histogram counted every reconcile with its paused-clock
/// duration, the worker gauges read 4 and 0.
#[tokio::test(start_paused = true)]
async fn counters_match_the_reconciles_observed() {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let queue_metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let rng = Arc::new(Mutex::new(Rng::new(7)));
    let observed: Arc<Mutex<HashMap<&'static str, u64>>> = Arc::default();
    let o = observed.clone();
    let shutdown = CancellationToken::new();
    let run = Controller::new("pods", move |_key: u32, ctx: Context| {
        // Failing keys settle: after two attempts every key succeeds.
        let pick = if ctx.attempts() >= 2 {
            0
        } else {
            rng.lock().unwrap().below(5)
        };
        async move {
            sleep(Duration::from_millis(200)).await;
            match pick {
                0 => Ok(Action::Done),
                1 => Ok(Action::RequeueRateLimited),
                2 => Ok(Action::requeue_after(Duration::from_secs(1))),
                3 => Err(Failed),
                _ => panic!("seeded panic"),
            }
        }
    })
    .source(|| futures::stream::iter(0..40))
    .workers(4)
    .metrics(metrics)
    .queue_metrics(queue_metrics)
    .on_event(move |e| {
        if let Event::ReconcileFinished { outcome, .. } = e {
            let result = match outcome {
                ReconcileOutcome::Ok(Action::Done) => "success",
                ReconcileOutcome::Ok(Action::RequeueRateLimited) => "requeue",
                ReconcileOutcome::Ok(Action::RequeueAfter(_)) => "requeue_after",
                ReconcileOutcome::Error(_) => "error",
                ReconcileOutcome::Panic(_) => "panic",
                _ => "other",
            };
            *o.lock().unwrap().entry(result).or_default() += 1;
        }
    })
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(1)).await;
    let mut mid = String::new();
    encode(&mut mid, &registry).unwrap();
    assert!(mid.contains("controller_runtime_reconcile_panics_total{controller=\"pods\"}"));
    assert_eq!(
        value(
            &mid,
            r#"controller_runtime_active_workers{controller="pods"}"#
        ),
        4.0
    );
    sleep(Duration::from_secs(120)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let observed = observed.lock().unwrap();
    let seen = |k: &str| observed.get(k).copied().unwrap_or(0) as f64;
    let total = |r: &str| {
        value(
            &text,
            &format!(r#"controller_runtime_reconcile_total{{controller="pods",result="{r}"}}"#),
        )
    };
    assert!(
        ["success", "requeue", "requeue_after", "error", "panic"]
            .iter()
            .all(|k| seen(k) > 0.0)
    );
    assert_eq!(total("success"), seen("success"));
    assert_eq!(total("requeue"), seen("requeue"));
    assert_eq!(total("requeue_after"), seen("requeue_after"));
    assert_eq!(total("error"), seen("error") + seen("panic"));
    let errors = value(
        &text,
        r#"controller_runtime_reconcile_errors_total{controller="pods"}"#,
    );
    let panics = value(
        &text,
        r#"controller_runtime_reconcile_panics_total{controller="pods"}"#,
    );
    assert_eq!(errors, seen("error") + seen("panic"));
    assert_eq!(panics, seen("panic"));
    let count = value(
        &text,
        r#"controller_runtime_reconcile_time_seconds_count{controller="pods"}"#,
    );
    let sum = value(
        &text,
        r#"controller_runtime_reconcile_time_seconds_sum{controller="pods"}"#,
    );
    assert_eq!(count, summary.reconciles as f64);
    assert!((sum - 0.2 * count).abs() < 1e-6, "{sum} for {count}");
    let le = value(
        &text,
        r#"controller_runtime_reconcile_time_seconds_bucket{le="0.15",controller="pods"}"#,
    );
    assert_eq!(le, 0.0);
    assert_eq!(
        value(
            &text,
            r#"controller_runtime_max_concurrent_reconciles{controller="pods"}"#
        ),
        4.0
    );
    assert_eq!(
        value(
            &text,
            r#"controller_runtime_active_workers{controller="pods"}"#
        ),
        0.0
    );
    assert_eq!(summary.panics as f64, panics);
    // The queue's metrics, under the controller's name: 40 listed keys plus every requeue came
    // through it.
    let adds = value(
        &text,
        r#"workqueue_adds_total{controller="pods",name="pods"}"#,
    );
    assert!(
        adds >= 40.0 + seen("requeue") + seen("requeue_after"),
        "{adds}"
    );
    let depth = r#"workqueue_depth{controller="pods",name="pods",priority="0"}"#;
    assert_eq!(value(&text, depth), 0.0);
    assert_eq!(summary.errors as f64, errors - panics);
}

/// The exposition as Prometheus stores it from controller-runtime: every HELP line is the Go
/// text exactly, and each bucket's `le` is written as Go's client writes it.
#[tokio::test(start_paused = true)]
async fn help_lines_and_bucket_bounds_are_controller_runtimes() {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("pods", move |_key: u32, _ctx: Context| {
        stop.cancel();
        async { Ok::<_, Failed>(Action::Done) }
    })
    .source(|| futures::stream::iter([1]))
    .metrics(metrics)
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(summary.reconciles, 1);

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
    assert_eq!(
        help,
        [
            "# HELP controller_runtime_reconcile Total number of reconciliations per controller",
            "# HELP controller_runtime_reconcile_errors Total number of reconciliation errors per controller",
            "# HELP controller_runtime_reconcile_panics Total number of reconciliation panics per controller",
            "# HELP controller_runtime_reconcile_timeouts Total number of reconciliation timeouts per controller",
            "# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller",
            "# HELP controller_runtime_max_concurrent_reconciles Maximum number of concurrent reconciles per controller",
            "# HELP controller_runtime_active_workers Number of currently used workers per controller",
            "# HELP ctrlq_controller_shards_held Number of shards this replica leads per sharded controller",
            "# HELP ctrlq_controller_shards_unowned Number of shards held by no replica at this replica's last look per sharded controller",
            "# HELP ctrlq_controller_shards_unowned_seconds Time the shard unowned longest has been held by no replica per sharded controller",
            "# HELP ctrlq_controller_shard_selector_ignored Total number of lists of a shard the API server did not filter by its shard selector per sharded controller",
            "# HELP ctrlq_controller_shard_moves Total number of shards that came to this replica per sharded controller",
            "# HELP ctrlq_controller_first_reconcile_seconds Time from gaining a lease or a shard to the first reconcile of the term per controller",
            "# HELP ctrlq_controller_source_errors Total number of errors yielded per controller and source",
            "# HELP ctrlq_controller_source_failures Total number of source failures followed by a new subscription per controller and source",
            "# HELP ctrlq_controller_reconcile_overruns Total number of reconciliations that ran past a deadline that could not cut them per controller",
        ],
        "{text}"
    );
    // controller-runtime's buckets, as Go's client writes them.
    let go = [
        "0.005", "0.01", "0.025", "0.05", "0.1", "0.15", "0.2", "0.25", "0.3", "0.35", "0.4",
        "0.45", "0.5", "0.6", "0.7", "0.8", "0.9", "1", "1.25", "1.5", "1.75", "2", "2.5", "3",
        "3.5", "4", "4.5", "5", "6", "7", "8", "9", "10", "15", "20", "25", "30", "40", "50", "60",
        "+Inf",
    ];
    let buckets: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_time_seconds_bucket{"))
        .collect();
    let expected: Vec<String> = go
        .iter()
        .map(|le| {
            format!(r#"controller_runtime_reconcile_time_seconds_bucket{{le="{le}",controller="pods"}} 1"#)
        })
        .collect();
    assert_eq!(buckets, expected, "{text}");
    assert!(text.ends_with("\n# EOF\n"), "{text}");
}

/// The controller's queue writes the `workqueue_*` series as a controller-runtime operator's
/// (v0.24.1, `pkg/internal/metrics/workqueue.go`): labels `controller` and `name`, both the
/// controller's name, `priority="0"` on the depth, controller-runtime's help texts, and its
/// `ExponentialBuckets(10e-9, 10, 12)` as Go's client writes each `le`. One key reconciled in
/// 200 ms.
#[tokio::test(start_paused = true)]
async fn the_queue_series_are_controller_runtimes() {
    let mut registry = Registry::default();
    let queue_metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("pods", move |_key: u32, _ctx: Context| {
        let stop = stop.clone();
        async move {
            sleep(Duration::from_millis(200)).await;
            stop.cancel();
            Ok::<_, Failed>(Action::Done)
        }
    })
    .source(|| futures::stream::iter([1]))
    .queue_metrics(queue_metrics)
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(summary.reconciles, 1);

    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let labels = r#"{controller="pods",name="pods"}"#;
    for expected in [
        r#"workqueue_depth{controller="pods",name="pods",priority="0"} 0"#.to_owned(),
        format!("workqueue_adds_total{labels} 1"),
        format!("workqueue_queue_duration_seconds_count{labels} 1"),
        format!("workqueue_work_duration_seconds_sum{labels} 0.2"),
        format!("workqueue_work_duration_seconds_count{labels} 1"),
        format!("workqueue_unfinished_work_seconds{labels} 0.0"),
        format!("workqueue_longest_running_processor_seconds{labels} 0.0"),
        format!("workqueue_retries_total{labels} 0"),
    ] {
        assert!(lines.contains(&expected.as_str()), "{expected}\n{text}");
    }
    let go = [
        "1e-08",
        "1e-07",
        "1e-06",
        "9.999999999999999e-06",
        "9.999999999999999e-05",
        "0.001",
        "0.01",
        "0.1",
        "1",
        "10",
        "100",
        "1000",
        "+Inf",
    ];
    let buckets: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("workqueue_work_duration_seconds_bucket{"))
        .collect();
    // 0.2 s lies above the eight bounds up to 0.1 and within the rest.
    let expected: Vec<String> = go
        .iter()
        .enumerate()
        .map(|(i, le)| {
            let n = u8::from(i >= 8);
            format!(
                r#"workqueue_work_duration_seconds_bucket{{le="{le}",controller="pods",name="pods"}} {n}"#
            )
        })
        .collect();
    assert_eq!(buckets, expected, "{text}");
    let help: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("# HELP workqueue_"))
        .collect();
    assert_eq!(
        help,
        [
            "# HELP workqueue_depth Current depth of workqueue by workqueue and priority",
            "# HELP workqueue_adds Total number of adds handled by workqueue",
            "# HELP workqueue_queue_duration_seconds How long in seconds an item stays in workqueue before being requested",
            "# HELP workqueue_work_duration_seconds How long in seconds processing an item from workqueue takes.",
            "# HELP workqueue_unfinished_work_seconds How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            "# HELP workqueue_longest_running_processor_seconds How many seconds has the longest running processor for workqueue been running.",
            "# HELP workqueue_retries Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
        ],
        "{text}"
    );
}

/// `ctrlq_controller_first_reconcile_seconds` observes each term's first reconcile, as
/// `Event::FirstReconcile` reports it: a first term whose source yields its key 2 s after the
/// lease was won, then a term won again after a lost lease, filled from the warm view at once.
#[tokio::test(start_paused = true)]
async fn the_first_reconcile_histogram_observes_each_terms_first_reconcile() {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let store = ctrlq_leader::MemoryStore::new();
    let config = ctrlq_leader::LeaderElectionConfig::default();
    let elector = ctrlq_leader::LeaderElector::new(store.lock("a"), config).unwrap();
    let firsts: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let f = firsts.clone();
    let shutdown = CancellationToken::new();
    let run = Controller::new("pods", |_key: u32, _ctx: Context| async {
        Ok::<_, Failed>(Action::Done)
    })
    .source(|| {
        let later = futures::stream::once(async {
            sleep(Duration::from_secs(2)).await;
            1
        });
        futures::StreamExt::chain(later, futures::stream::pending())
    })
    .leader_elector(Arc::new(elector))
    .metrics(metrics)
    .on_event(move |e| {
        if let Event::FirstReconcile { after, .. } = e {
            f.lock().unwrap().push(*after);
        }
    })
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(5)).await;
    let histogram = |registry: &Registry, suffix: &str| {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        value(
            &text,
            &format!("ctrlq_controller_first_reconcile_seconds_{suffix}"),
        )
    };
    assert_eq!(*firsts.lock().unwrap(), [Duration::from_secs(2)]);
    assert_eq!(histogram(&registry, r#"count{controller="pods"}"#), 1.0);
    assert_eq!(histogram(&registry, r#"sum{controller="pods"}"#), 2.0);
    assert_eq!(
        histogram(&registry, r#"bucket{le="1.75",controller="pods"}"#),
        0.0
    );
    assert_eq!(
        histogram(&registry, r#"bucket{le="2",controller="pods"}"#),
        1.0
    );
    // The lease is lost, then won again: the new term starts from the warm view.
    store.partition("a", true);
    sleep(Duration::from_secs(20)).await;
    store.partition("a", false);
    sleep(Duration::from_secs(20)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!(summary.terms, 2);
    assert_eq!(
        *firsts.lock().unwrap(),
        [Duration::from_secs(2), Duration::ZERO]
    );
    assert_eq!(histogram(&registry, r#"count{controller="pods"}"#), 2.0);
    assert_eq!(histogram(&registry, r#"sum{controller="pods"}"#), 2.0);
    assert_eq!(
        histogram(&registry, r#"bucket{le="0.005",controller="pods"}"#),
        1.0
    );
}

/// A source's error items and its failures are counted per source: a watch that keeps failing
/// shows in the metrics, not only in a log.
#[tokio::test(start_paused = true)]
async fn source_errors_and_failures_are_counted_per_source() {
    let mut registry = Registry::default();
    let metrics = ControllerMetrics::register(&mut registry);
    let shutdown = CancellationToken::new();
    let subscriptions = Arc::new(Mutex::new(0));
    let counted = subscriptions.clone();
    let run = Controller::new("pods", |_key: u32, _ctx: Context| async {
        Ok::<_, Failed>(Action::Done)
    })
    .try_source(|| {
        let items = [Ok(1), Err("watch of Pod failed: 403"), Err("again"), Ok(2)];
        futures::stream::iter(items).chain(futures::stream::pending())
    })
    .source(move || {
        let n = {
            let mut n = counted.lock().unwrap();
            *n += 1;
            *n
        };
        // The first subscription panics at once; the next one runs.
        assert!(n > 1, "a source that panics");
        futures::stream::pending::<u32>()
    })
    .metrics(metrics)
    .run(shutdown.clone());
    let run = tokio::spawn(run);
    sleep(Duration::from_secs(5)).await;
    shutdown.cancel();
    let summary = bounded(Duration::from_secs(60), run).await.unwrap();
    assert_eq!((summary.source_errors, summary.source_failures), (2, 1));
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let errors = r#"ctrlq_controller_source_errors_total{controller="pods",source="0"}"#;
    assert_eq!(value(&text, errors), 2.0, "{text}");
    let failures = r#"ctrlq_controller_source_failures_total{controller="pods",source="1"}"#;
    assert_eq!(value(&text, failures), 1.0, "{text}");
    assert!(text.contains(
        "# HELP ctrlq_controller_source_errors Total number of errors yielded per controller and source\n"
    ));
}

/// `Metrics::register` and `Controller::prometheus`: one registration and one call wire the
/// reconcile families, the queue's as controller-runtime writes them, and the elector's.
#[tokio::test(start_paused = true)]
async fn one_call_wires_the_reconcile_the_queue_and_the_election_families() {
    use ctrlq_controller::prometheus::Metrics;
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let elector = LeaderElector::new(
        MemoryStore::new().lock("a"),
        LeaderElectionConfig::default(),
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("pods", move |_key: u32, _ctx: Context| {
        stop.cancel();
        async { Ok::<_, Failed>(Action::Done) }
    })
    .source(|| futures::stream::iter([1]))
    .leader_elector(elector.unwrap())
    .prometheus(&metrics)
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(summary.reconciles, 1);
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    for (series, expected) in [
        (
            r#"controller_runtime_reconcile_total{controller="pods",result="success"}"#,
            1.0,
        ),
        (
            r#"workqueue_adds_total{controller="pods",name="pods"}"#,
            1.0,
        ),
        (r#"leader_election_master_status{name="leader"}"#, 0.0),
    ] {
        assert_eq!(value(&text, series), expected, "{series} in\n{text}");
    }
}
