//! The Prometheus text exposition: client-go's metrics sequence, and every family checked
//! against component-base's definitions; with `register_controller_runtime`, against
//! controller-runtime's.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::prometheus::{CONTENT_TYPE, MAX_PRIORITY_LABELS, QueueMetrics, encode};
use ctrlq_queue_async::{PriorityQueue, WorkQueue};
use prometheus_client::registry::Registry;
use support::bounded;
use tokio::time::advance;

fn scrape(registry: &Registry) -> String {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text
}

fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in\n{text}"))
}

#[tokio::test(start_paused = true)]
async fn the_text_exposition_after_client_gos_sequence() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("test").metrics(metrics).build();

    queue.add("foo").unwrap();
    advance(Duration::from_micros(50)).await;
    let item = bounded(queue.get()).await.unwrap();
    for _ in 0..5 {
        queue.add("foo").unwrap();
    }
    let text = scrape(&registry);
    assert_eq!(
        line(&text, "workqueue_adds_total{"),
        r#"workqueue_adds_total{name="test"} 2"#
    );
    assert_eq!(
        line(&text, "workqueue_depth{"),
        r#"workqueue_depth{name="test"} 1"#
    );
    assert_eq!(
        line(&text, "workqueue_queue_duration_seconds_sum{"),
        r#"workqueue_queue_duration_seconds_sum{name="test"} 0.00005"#
    );
    advance(Duration::from_micros(25)).await;
    item.done();
    let item = bounded(queue.get()).await.unwrap();
    let text = scrape(&registry);
    assert_eq!(
        line(&text, "workqueue_work_duration_seconds_count{"),
        r#"workqueue_work_duration_seconds_count{name="test"} 1"#
    );
    assert_eq!(
        line(&text, "workqueue_queue_duration_seconds_count{"),
        r#"workqueue_queue_duration_seconds_count{name="test"} 2"#
    );
    // The gauges refresh every 500 ms; one item has been running since the last get.
    tokio::time::sleep(Duration::from_millis(1001)).await;
    let text = scrape(&registry);
    let value = |prefix: &str| -> f64 {
        line(&text, prefix)
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let unfinished = value("workqueue_unfinished_work_seconds{");
    assert!((0.5..=1.001).contains(&unfinished), "{unfinished}");
    assert_eq!(
        value("workqueue_longest_running_processor_seconds{"),
        unfinished
    );
    item.done();
    queue.add_rate_limited("bar").unwrap();
    let text = scrape(&registry);
    assert_eq!(
        line(&text, "workqueue_retries_total{"),
        r#"workqueue_retries_total{name="test"} 1"#
    );
}

#[tokio::test(start_paused = true)]
async fn priority_depth_is_labelled_and_capped() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: PriorityQueue<i32> = PriorityQueue::builder().name("pq").metrics(metrics).build();
    for p in 0..(MAX_PRIORITY_LABELS as i32 + 5) {
        queue
            .add_with(p, AddOptions::default().priority(p))
            .unwrap();
    }
    let text = scrape(&registry);
    assert!(
        text.contains(r#"workqueue_depth{name="pq",priority="0"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"workqueue_depth{name="pq",priority="24"} 1"#));
    assert!(!text.contains(r#"priority="25""#));
    assert!(text.contains(r#"workqueue_depth{name="pq",priority="exceeded_cardinality_limit"} 5"#));
    // Highest first: the capped ones leave their shared label.
    for _ in 0..5 {
        bounded(queue.get()).await.unwrap().done();
    }
    let text = scrape(&registry);
    assert!(text.contains(r#"workqueue_depth{name="pq",priority="exceeded_cardinality_limit"} 0"#));
}

/// One metric family as `k8s.io/component-base/metrics/prometheus/workqueue/metrics.go` defines
/// it (subsystem `workqueue`, label `name`), transcribed.
struct Definition {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Whether it has component-base's `ExponentialBuckets(10e-7, 10, 10)`.
    histogram: bool,
}

const COMPONENT_BASE: [Definition; 7] = [
    Definition {
        name: "workqueue_depth",
        kind: "gauge",
        help: "Current depth of workqueue",
        histogram: false,
    },
    Definition {
        name: "workqueue_adds_total",
        kind: "counter",
        help: "Total number of adds handled by workqueue",
        histogram: false,
    },
    Definition {
        name: "workqueue_queue_duration_seconds",
        kind: "histogram",
        help: "How long in seconds an item stays in workqueue before being requested.",
        histogram: true,
    },
    Definition {
        name: "workqueue_work_duration_seconds",
        kind: "histogram",
        help: "How long in seconds processing an item from workqueue takes.",
        histogram: true,
    },
    Definition {
        name: "workqueue_unfinished_work_seconds",
        kind: "gauge",
        help: concat!(
            "How many seconds of work has done that ",
            "is in progress and hasn't been observed by work_duration. Large ",
            "values indicate stuck threads. One can deduce the number of stuck ",
            "threads by observing the rate at which this increases."
        ),
        histogram: false,
    },
    Definition {
        name: "workqueue_longest_running_processor_seconds",
        kind: "gauge",
        help: concat!(
            "How many seconds has the longest running ",
            "processor for workqueue been running."
        ),
        histogram: false,
    },
    Definition {
        name: "workqueue_retries_total",
        kind: "counter",
        help: "Total number of retries handled by workqueue",
        histogram: false,
    },
];

/// client_golang's `ExponentialBuckets`, step by step as Go runs it.
fn go_exponential_buckets(mut start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(start);
        start *= factor;
    }
    out
}

/// One family of the exposition: its HELP and TYPE, and each sample's name and labels.
#[derive(Debug, Default)]
struct Scraped {
    help: Option<String>,
    kind: Option<String>,
    samples: Vec<(String, BTreeMap<String, String>)>,
}

fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for pair in body.split("\",") {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
        labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
    }
    labels
}

/// The exposition by family name, as Prometheus reads it (OpenMetrics names a counter's family
/// without `_total`; its samples carry it).
fn families(text: &str) -> BTreeMap<String, Scraped> {
    let mut out: BTreeMap<String, Scraped> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            out.entry(name.to_owned()).or_default().help = Some(help.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.entry(name.to_owned()).or_default().kind = Some(kind.to_owned());
        } else if line.starts_with('#') {
            assert_eq!(line, "# EOF", "no other comment lines");
        } else {
            let (series, _value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, body)) => (name, parse_labels(body.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let family = out
                .keys()
                .filter(|f| name.starts_with(f.as_str()))
                .max_by_key(|f| f.len())
                .unwrap_or_else(|| panic!("sample {name} before its family"))
                .clone();
            out.get_mut(&family)
                .unwrap()
                .samples
                .push((name.to_owned(), labels));
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn every_family_is_component_bases_definition() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder()
        .name("wq")
        .metrics(metrics.clone())
        .build();
    let priority: PriorityQueue<&str> =
        PriorityQueue::builder().name("pq").metrics(metrics).build();
    // Every series gets a value: an add, a get, a done, a retry, a gauge refresh.
    queue.add("a").unwrap();
    bounded(queue.get())
        .await
        .unwrap()
        .requeue_rate_limited()
        .unwrap();
    priority.add_with_priority("b", 3).unwrap();
    let _held = bounded(priority.get()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;

    let text = scrape(&registry);
    let scraped = families(&text);
    // The seven, and ctrlq's oldest wait, which a priority queue reports.
    let expected_families: BTreeSet<String> = COMPONENT_BASE
        .iter()
        .map(|d| d.name.trim_end_matches("_total").to_owned())
        .chain(["ctrlq_workqueue_oldest_wait_seconds".to_owned()])
        .collect();
    assert_eq!(
        scraped.keys().cloned().collect::<BTreeSet<_>>(),
        expected_families,
        "exactly the seven families and ctrlq's oldest wait\n{text}"
    );
    let mut bounds: Vec<String> = go_exponential_buckets(10e-7, 10.0, 10)
        .into_iter()
        .map(|b| b.to_bits().to_string())
        .collect();
    bounds.push("+Inf".to_owned());

    for def in &COMPONENT_BASE {
        let family = &scraped[def.name.trim_end_matches("_total")];
        assert_eq!(family.help.as_deref(), Some(def.help), "{}: help", def.name);
        assert_eq!(family.kind.as_deref(), Some(def.kind), "{}: type", def.name);
        assert!(
            !family.samples.is_empty(),
            "{}: no samples\n{text}",
            def.name
        );
        for (sample, labels) in &family.samples {
            let suffix = &sample[def.name.trim_end_matches("_total").len()..];
            let allowed: &[&str] = match def.kind {
                "counter" => &["_total"],
                "histogram" => &["_sum", "_count", "_bucket"],
                _ => &[""],
            };
            assert!(allowed.contains(&suffix), "{}: sample {sample}", def.name);
            let mut names: BTreeSet<&str> = labels.keys().map(String::as_str).collect();
            assert!(names.remove("name"), "{sample}: the name label");
            if suffix == "_bucket" {
                assert!(names.remove("le"), "{sample}: le");
            }
            if def.name == "workqueue_depth" && labels["name"] == "pq" {
                // controller-runtime's extra label on a priority queue's depth.
                assert!(names.remove("priority"), "{sample}: priority");
            }
            assert!(names.is_empty(), "{sample}: unexpected labels {names:?}");
        }
        if def.histogram {
            for queue_name in ["wq", "pq"] {
                let les: Vec<String> = family
                    .samples
                    .iter()
                    .filter(|(s, l)| s.ends_with("_bucket") && l["name"] == queue_name)
                    .map(|(_, l)| match l["le"].as_str() {
                        "+Inf" => "+Inf".to_owned(),
                        le => le.parse::<f64>().unwrap().to_bits().to_string(),
                    })
                    .collect();
                assert_eq!(les, bounds, "{}: the bounds are Go's floats", def.name);
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_observation_of_exactly_a_bound_counts_in_its_bucket() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("q").metrics(metrics).build();
    queue.add("a").unwrap();
    advance(Duration::from_millis(100)).await;
    let _item = bounded(queue.get()).await.unwrap();
    let text = scrape(&registry);
    assert_eq!(
        line(
            &text,
            r#"workqueue_queue_duration_seconds_bucket{le="0.01","#
        ),
        r#"workqueue_queue_duration_seconds_bucket{le="0.01",name="q"} 0"#
    );
    assert_eq!(
        line(
            &text,
            r#"workqueue_queue_duration_seconds_bucket{le="0.1","#
        ),
        r#"workqueue_queue_duration_seconds_bucket{le="0.1",name="q"} 1"#,
        "0.1 s is in le=0.1, as in Go\n{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn unfinished_work_is_zero_once_every_item_is_done() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("q").metrics(metrics).build();
    queue.add("a").unwrap();
    queue.add("b").unwrap();
    let a = bounded(queue.get()).await.unwrap();
    let b = bounded(queue.get()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let gauges = |text: &str| {
        (
            line(text, "workqueue_unfinished_work_seconds{").to_owned(),
            line(text, "workqueue_longest_running_processor_seconds{").to_owned(),
        )
    };
    let text = scrape(&registry);
    assert_eq!(
        gauges(&text),
        (
            r#"workqueue_unfinished_work_seconds{name="q"} 1.0"#.to_owned(),
            r#"workqueue_longest_running_processor_seconds{name="q"} 0.5"#.to_owned()
        )
    );
    // Shut down: no refresh comes any more, yet the gauges follow the last done.
    queue.shut_down();
    a.done();
    let text = scrape(&registry);
    assert_eq!(
        line(&text, "workqueue_unfinished_work_seconds{"),
        r#"workqueue_unfinished_work_seconds{name="q"} 1.0"#,
        "one item still in progress"
    );
    b.done();
    let text = scrape(&registry);
    assert_eq!(
        gauges(&text),
        (
            r#"workqueue_unfinished_work_seconds{name="q"} 0.0"#.to_owned(),
            r#"workqueue_longest_running_processor_seconds{name="q"} 0.0"#.to_owned()
        )
    );
}

/// Each bucket's `le` is written as Go's client writes it (`strconv.FormatFloat(v, 'g', -1,
/// 64)`), so that a query selecting a bucket by `le`, as written against client-go's series,
/// finds this one; the exposition stays OpenMetrics text, ending with `# EOF`.
#[tokio::test(start_paused = true)]
async fn bucket_bounds_are_written_as_gos_client_writes_them() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("q").metrics(metrics).build();
    queue.add("a").unwrap();
    bounded(queue.get()).await.unwrap().done();
    let text = scrape(&registry);
    let go = [
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
    for family in [
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
    ] {
        let buckets: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{family}_bucket{{")))
            .collect();
        let expected: Vec<String> = go
            .iter()
            .map(|le| format!(r#"{family}_bucket{{le="{le}",name="q"}} 1"#))
            .collect();
        assert_eq!(buckets, expected, "{text}");
    }
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert_eq!(
        CONTENT_TYPE,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
}

/// Every HELP line is component-base's text exactly: no period added.
#[tokio::test(start_paused = true)]
async fn help_lines_are_component_bases_texts_exactly() {
    let mut registry = Registry::default();
    let _metrics = QueueMetrics::register(&mut registry);
    let text = scrape(&registry);
    let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
    let expected: Vec<String> = COMPONENT_BASE
        .iter()
        .map(|d| format!("# HELP {} {}", d.name.trim_end_matches("_total"), d.help))
        .collect();
    assert_eq!(help, expected);
}

/// controller-runtime's help texts (v0.24.1, `pkg/internal/metrics/workqueue.go`), transcribed
/// with Go's string pieces, in the order of [`COMPONENT_BASE`].
const CONTROLLER_RUNTIME_HELP: [&str; 7] = [
    "Current depth of workqueue by workqueue and priority",
    "Total number of adds handled by workqueue",
    "How long in seconds an item stays in workqueue before being requested",
    "How long in seconds processing an item from workqueue takes.",
    concat!(
        "How many seconds of work has been done that ",
        "is in progress and hasn't been observed by work_duration. Large ",
        "values indicate stuck threads. One can deduce the number of stuck ",
        "threads by observing the rate at which this increases."
    ),
    concat!(
        "How many seconds has the longest running ",
        "processor for workqueue been running."
    ),
    concat!(
        "Total number of items added to the workqueue with a non-zero delay ",
        "(rate-limited requeues, explicit RequeueAfter or AddAfter calls)"
    ),
];

/// controller-runtime's `ExponentialBuckets(10e-9, 10, 12)` as Go's client writes each `le`.
const CONTROLLER_RUNTIME_BOUNDS: [&str; 13] = [
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

/// The bucket lines of histogram `family` of controller `name`, with `count` observations from
/// bound `first` (an index into [`CONTROLLER_RUNTIME_BOUNDS`]) on and none below it.
fn controller_runtime_buckets(family: &str, name: &str, first: usize, count: u64) -> String {
    CONTROLLER_RUNTIME_BOUNDS
        .iter()
        .enumerate()
        .map(|(i, le)| {
            let n = if i >= first { count } else { 0 };
            format!("{family}_bucket{{le=\"{le}\",controller=\"{name}\",name=\"{name}\"}} {n}\n")
        })
        .collect()
}

/// A controller's work queue with controller-runtime's definitions, after an add, a get 50 µs
/// later, a done 2 ms after that and a rate-limited add: the whole exposition, line by line, as
/// a controller-runtime operator's (labels `controller` and `name`, `priority="0"` on the
/// depth, its help texts and its bounds from 10 ns).
#[tokio::test(start_paused = true)]
async fn controller_runtimes_definitions_write_its_labels_bounds_and_help_texts() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("pods").metrics(metrics).build();
    queue.add("a").unwrap();
    advance(Duration::from_micros(50)).await;
    let item = bounded(queue.get()).await.unwrap();
    advance(Duration::from_millis(2)).await;
    item.done();
    queue.add_rate_limited("b").unwrap();

    let labels = r#"{controller="pods",name="pods"}"#;
    let help = |i: usize| {
        let name = COMPONENT_BASE[i].name.trim_end_matches("_total");
        format!(
            "# HELP {name} {}\n# TYPE {name} {}\n",
            CONTROLLER_RUNTIME_HELP[i], COMPONENT_BASE[i].kind
        )
    };
    let queue_duration = "workqueue_queue_duration_seconds";
    let work_duration = "workqueue_work_duration_seconds";
    let expected = [
        help(0),
        "workqueue_depth{controller=\"pods\",name=\"pods\",priority=\"0\"} 0\n".to_owned(),
        help(1),
        format!("workqueue_adds_total{labels} 1\n"),
        help(2),
        format!("{queue_duration}_sum{labels} 0.00005\n{queue_duration}_count{labels} 1\n"),
        controller_runtime_buckets(queue_duration, "pods", 4, 1),
        help(3),
        format!("{work_duration}_sum{labels} 0.002\n{work_duration}_count{labels} 1\n"),
        controller_runtime_buckets(work_duration, "pods", 6, 1),
        help(4),
        format!("workqueue_unfinished_work_seconds{labels} 0.0\n"),
        help(5),
        format!("workqueue_longest_running_processor_seconds{labels} 0.0\n"),
        help(6),
        format!("workqueue_retries_total{labels} 1\n"),
        "# EOF\n".to_owned(),
    ]
    .concat();
    assert_eq!(scrape(&registry), expected);
}

/// A priority queue with controller-runtime's definitions labels its depth by each item's
/// priority, next to `controller` and `name`.
#[tokio::test(start_paused = true)]
async fn controller_runtimes_priority_depth_is_labelled_by_priority() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let queue: PriorityQueue<&str> = PriorityQueue::builder().name("pq").metrics(metrics).build();
    queue.add_with_priority("a", 3).unwrap();
    queue.add_with_priority("b", -100).unwrap();
    queue.add_with_priority("c", -100).unwrap();
    bounded(queue.get()).await.unwrap().done();
    let text = scrape(&registry);
    assert_eq!(
        line(
            &text,
            r#"workqueue_depth{controller="pq",name="pq",priority="3"}"#
        ),
        r#"workqueue_depth{controller="pq",name="pq",priority="3"} 0"#
    );
    assert_eq!(
        line(
            &text,
            r#"workqueue_depth{controller="pq",name="pq",priority="-100"}"#
        ),
        r#"workqueue_depth{controller="pq",name="pq",priority="-100"} 2"#
    );
    assert!(!text.contains(r#"priority="0""#), "{text}");
}

/// Every HELP line is controller-runtime's text exactly, in the order of component-base's.
#[tokio::test(start_paused = true)]
async fn help_lines_are_controller_runtimes_texts_exactly() {
    let mut registry = Registry::default();
    let _metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let text = scrape(&registry);
    let help: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
    let expected: Vec<String> = COMPONENT_BASE
        .iter()
        .zip(CONTROLLER_RUNTIME_HELP)
        .map(|(d, help)| format!("# HELP {} {help}", d.name.trim_end_matches("_total")))
        .collect();
    assert_eq!(help, expected);
}

/// The oldest wait of each priority of a priority queue: the age of its oldest key waiting to
/// be handed out, refreshed with the unfinished-work gauges, 0 once none of that priority
/// waits; a work queue writes none.
#[tokio::test(start_paused = true)]
async fn the_oldest_wait_of_each_priority_is_reported() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::register_controller_runtime(&mut registry);
    let queue: PriorityQueue<&str> = PriorityQueue::builder()
        .name("pods")
        .metrics(metrics.clone())
        .build();
    let work: WorkQueue<&str> = WorkQueue::builder().name("work").metrics(metrics).build();
    work.add("w").unwrap();
    queue.add_with_priority("listed-1", -100).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    queue.add_with_priority("listed-2", -100).unwrap();
    queue.add_with_priority("live", 0).unwrap();
    // The gauges are refreshed every 500 ms: the last refresh is at 3 s or just before.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = scrape(&registry);
    let gauge = |p: &str| {
        format!(
            r#"ctrlq_workqueue_oldest_wait_seconds{{controller="pods",name="pods",priority="{p}"}}"#
        )
    };
    assert!(
        line(&text, &gauge("-100")).ends_with(" 3.0")
            || line(&text, &gauge("-100")).ends_with(" 2.5"),
        "{text}"
    );
    let live = bounded(queue.get()).await.unwrap();
    assert_eq!(*live.key(), "live");
    live.done();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = scrape(&registry);
    assert_eq!(line(&text, &gauge("0")), format!("{} 0.0", gauge("0")));
    let listed = line(&text, &gauge("-100"));
    let age: f64 = listed.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (3.0..=4.0).contains(&age),
        "the oldest listed key's age: {listed}"
    );
    assert!(
        !text.contains(r#"ctrlq_workqueue_oldest_wait_seconds{controller="work""#),
        "{text}"
    );
}
