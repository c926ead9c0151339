//! The Prometheus text exposition after client-go's metrics sequence: names, labels, values.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use queue_async::priority::AddOptions;
use queue_async::prometheus::{MAX_PRIORITY_LABELS, PrometheusMetrics};
use queue_async::{PriorityQueue, WorkQueue};
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
    let metrics = PrometheusMetrics::register(&mut registry);
    let queue: WorkQueue<&str> = WorkQueue::builder().name("test").metrics(metrics).build();

    queue.add("foo").unwrap();
    advance(Duration::from_micros(50)).await;
    let item = queue.get().await.unwrap();
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
    let item = queue.get().await.unwrap();
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
    // client-go's help texts, so existing dashboards and alerts read them unchanged.
    assert!(text.contains("# HELP workqueue_depth Current depth of workqueue."));
    assert!(text.contains(
        "# HELP workqueue_queue_duration_seconds How long in seconds an item stays in workqueue before being requested."
    ));
    assert!(
        text.contains(r#"workqueue_queue_duration_seconds_bucket{le="0.000001",name="test"}"#)
            || text.contains(r#"workqueue_queue_duration_seconds_bucket{le="1e-6",name="test"}"#)
    );
}

#[tokio::test(start_paused = true)]
async fn priority_depth_is_labelled_and_capped() {
    let mut registry = Registry::default();
    let metrics = PrometheusMetrics::register(&mut registry);
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
        queue.get().await.unwrap().done();
    }
    let text = scrape(&registry);
    assert!(text.contains(r#"workqueue_depth{name="pq",priority="exceeded_cardinality_limit"} 0"#));
}
