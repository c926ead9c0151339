//! A queue asks its metrics provider for each metric once, and reports into that one set: a
//! provider that keeps one handle per queue name reads whole counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use ctrlq_queue_async::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric,
};
use ctrlq_queue_async::priority::AddOptions;
use ctrlq_queue_async::{PriorityQueue, WorkQueue};
use parking_lot::Mutex;

mod support;
use support::bounded;

/// One value, whichever kind of metric it stands for: counters and gauges count in `value`,
/// histograms count their observations in it.
#[derive(Debug, Default)]
struct Value(AtomicI64);

impl Value {
    fn get(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl GaugeMetric for Value {
    fn inc(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn dec(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CounterMetric for Value {
    fn inc(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl HistogramMetric for Value {
    fn observe(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Last value set, in microseconds.
#[derive(Debug, Default)]
struct Settable(AtomicU64);

impl SettableGaugeMetric for Settable {
    fn set(&self, value: f64) {
        self.0.store((value * 1e6).round() as u64, Ordering::SeqCst);
    }
}

/// Counts every call per method and queue name, and keeps the one handle each call made: a
/// second call for the same metric replaces the first handle, as a provider keyed by name
/// would hand out a fresh series.
#[derive(Debug, Default)]
struct Counting {
    calls: Mutex<BTreeMap<(String, &'static str), usize>>,
    values: Mutex<BTreeMap<(String, &'static str), Arc<Value>>>,
    settables: Mutex<BTreeMap<(String, &'static str), Arc<Settable>>>,
}

impl Counting {
    fn value(&self, name: &str, method: &'static str) -> Arc<Value> {
        *self
            .calls
            .lock()
            .entry((name.to_owned(), method))
            .or_default() += 1;
        let value = Arc::new(Value::default());
        self.values
            .lock()
            .insert((name.to_owned(), method), value.clone());
        value
    }

    fn settable(&self, name: &str, method: &'static str) -> Arc<Settable> {
        *self
            .calls
            .lock()
            .entry((name.to_owned(), method))
            .or_default() += 1;
        let value = Arc::new(Settable::default());
        self.settables
            .lock()
            .insert((name.to_owned(), method), value.clone());
        value
    }

    /// The calls of queue `name`, by method.
    fn calls(&self, name: &str) -> BTreeMap<&'static str, usize> {
        self.calls
            .lock()
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, method), count)| (*method, *count))
            .collect()
    }

    /// The value of the last handle made for `method` of queue `name`.
    fn read(&self, name: &str, method: &'static str) -> i64 {
        self.values
            .lock()
            .get(&(name.to_owned(), method))
            .map_or(0, |v| v.get())
    }

    /// The last value set on the last handle made for `method` of queue `name` (µs).
    fn read_settable(&self, name: &str, method: &'static str) -> u64 {
        self.settables
            .lock()
            .get(&(name.to_owned(), method))
            .map_or(0, |v| v.0.load(Ordering::SeqCst))
    }
}

impl MetricsProvider for Counting {
    fn depth(&self, name: &str) -> Arc<dyn GaugeMetric> {
        self.value(name, "depth")
    }
    fn depth_for_priority(&self, name: &str, priority: i32) -> Arc<dyn GaugeMetric> {
        let method = match priority {
            0 => "depth_for_priority(0)",
            5 => "depth_for_priority(5)",
            _ => "depth_for_priority(other)",
        };
        self.value(name, method)
    }
    fn adds(&self, name: &str) -> Arc<dyn CounterMetric> {
        self.value(name, "adds")
    }
    fn queue_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        self.value(name, "queue_duration")
    }
    fn work_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        self.value(name, "work_duration")
    }
    fn unfinished_work_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        self.settable(name, "unfinished_work_seconds")
    }
    fn longest_running_processor_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        self.settable(name, "longest_running_processor_seconds")
    }
    fn retries(&self, name: &str) -> Arc<dyn CounterMetric> {
        self.value(name, "retries")
    }
}

/// The six metrics a queue asks for when it is built, each once.
fn built_once() -> BTreeMap<&'static str, usize> {
    [
        "adds",
        "queue_duration",
        "work_duration",
        "unfinished_work_seconds",
        "longest_running_processor_seconds",
        "retries",
    ]
    .into_iter()
    .map(|m| (m, 1))
    .collect()
}

const KEYS: u32 = 64;

/// Builds a work queue named `name`, runs `KEYS` adds, one delayed add and one rate-limited
/// add through it, each key handed out and done, and checks the provider's calls and values.
async fn work_queue_reports_once(name: &str) {
    let provider = Arc::new(Counting::default());
    let queue: WorkQueue<u32> = WorkQueue::builder()
        .name(name)
        .metrics(provider.clone())
        .build();
    let debug = format!("{queue:?}");
    assert_eq!(provider.calls(name), built_once(), "at build, {debug}");

    for k in 0..KEYS {
        queue.add(k).unwrap();
    }
    queue.add_after(KEYS, Duration::from_millis(10)).unwrap();
    queue.add_rate_limited(KEYS + 1).unwrap();
    assert_eq!(provider.read(name, "depth"), i64::from(KEYS));
    assert_eq!(provider.read(name, "retries"), 2);

    // The delayed keys come in while the first ones are handed out.
    let mut items = Vec::new();
    for _ in 0..KEYS + 2 {
        items.push(bounded(queue.get()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    // The refresh sums every item in progress into the one pair of gauges.
    assert!(provider.read_settable(name, "longest_running_processor_seconds") >= 500_000);
    assert!(
        provider.read_settable(name, "unfinished_work_seconds")
            >= u64::from(KEYS + 2) * 500_000 - 20_000,
        "{}",
        provider.read_settable(name, "unfinished_work_seconds")
    );
    for item in items {
        item.done();
    }
    let mut expected = built_once();
    expected.insert("depth", 1);
    assert_eq!(provider.calls(name), expected, "{debug}");
    assert_eq!(provider.read(name, "adds"), i64::from(KEYS + 2), "{debug}");
    assert_eq!(provider.read(name, "depth"), 0, "{debug}");
    assert_eq!(provider.read(name, "retries"), 2, "{debug}");
    assert_eq!(
        provider.read(name, "queue_duration"),
        i64::from(KEYS + 2),
        "{debug}"
    );
    assert_eq!(
        provider.read(name, "work_duration"),
        i64::from(KEYS + 2),
        "{debug}"
    );
    assert!(queue.is_empty() && queue.processing_len() == 0);
}

#[tokio::test(start_paused = true)]
async fn a_work_queue_asks_for_each_metric_once() {
    work_queue_reports_once("one").await;
}

/// Two queues on one provider: each name is asked for once.
#[tokio::test(start_paused = true)]
async fn each_queue_name_is_asked_for_once() {
    let provider = Arc::new(Counting::default());
    let a: WorkQueue<u32> = WorkQueue::builder()
        .name("a")
        .metrics(provider.clone())
        .build();
    let b: WorkQueue<u32> = WorkQueue::builder()
        .name("b")
        .metrics(provider.clone())
        .build();
    a.add(1).unwrap();
    b.add(1).unwrap();
    b.add(2).unwrap();
    let mut expected = built_once();
    expected.insert("depth", 1);
    assert_eq!(provider.calls("a"), expected);
    assert_eq!(provider.calls("b"), expected);
    assert_eq!(provider.read("a", "adds"), 1);
    assert_eq!(provider.read("b", "adds"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_priority_queue_asks_for_each_metric_once_and_each_priority_once() {
    let provider = Arc::new(Counting::default());
    let queue: PriorityQueue<u32> = PriorityQueue::builder()
        .name("prio")
        .metrics(provider.clone())
        .build();
    assert_eq!(provider.calls("prio"), built_once(), "at build");
    for k in 0..KEYS {
        queue
            .add_with_priority(k, if k % 2 == 0 { 0 } else { 5 })
            .unwrap();
    }
    queue
        .add_with(
            KEYS,
            AddOptions::default()
                .priority(5)
                .after(Duration::from_millis(10)),
        )
        .unwrap();
    for _ in 0..=KEYS {
        bounded(queue.get()).await.unwrap().done();
    }
    let mut expected = built_once();
    expected.insert("depth_for_priority(0)", 1);
    expected.insert("depth_for_priority(5)", 1);
    assert_eq!(provider.calls("prio"), expected);
    assert_eq!(provider.read("prio", "adds"), i64::from(KEYS + 1));
    assert_eq!(provider.read("prio", "retries"), 1);
    assert_eq!(provider.read("prio", "depth_for_priority(0)"), 0);
    assert_eq!(provider.read("prio", "depth_for_priority(5)"), 0);
    assert_eq!(provider.read("prio", "queue_duration"), i64::from(KEYS + 1));
    assert_eq!(provider.read("prio", "work_duration"), i64::from(KEYS + 1));
}
