//! A [`MetricsProvider`] that records everything, for tests of code that uses the queues'
//! metrics (feature `test-util`).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::{CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric};

/// What a [`RecordingProvider`] saw, for every queue name together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// Depth by priority (`None` for a queue without priorities).
    pub depth: BTreeMap<Option<i32>, i64>,
    /// The adds counter.
    pub adds: u64,
    /// The retries counter.
    pub retries: u64,
    /// Every queue-duration observation, in order (seconds).
    pub queue_durations: Vec<f64>,
    /// Every work-duration observation, in order (seconds).
    pub work_durations: Vec<f64>,
    /// The last unfinished-work value set.
    pub unfinished_work_seconds: f64,
    /// The last longest-running-processor value set.
    pub longest_running_processor_seconds: f64,
}

/// A provider whose metrics write into one shared [`Recorded`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use ctrlq_queue_async::WorkQueue;
/// use ctrlq_queue_async::metrics::testing::RecordingProvider;
///
/// let recording = Arc::new(RecordingProvider::default());
/// let queue = WorkQueue::builder().name("q").metrics(recording.clone()).build();
/// queue.add("a").unwrap();
/// queue.add("a").unwrap();
/// let seen = recording.recorded();
/// assert_eq!((seen.adds, seen.depth[&None]), (1, 1));
/// ```
#[derive(Debug, Default)]
pub struct RecordingProvider {
    recorded: Arc<Mutex<Recorded>>,
}

impl RecordingProvider {
    /// A copy of what was recorded so far.
    pub fn recorded(&self) -> Recorded {
        lock(&self.recorded).clone()
    }
}

fn lock(m: &Mutex<Recorded>) -> MutexGuard<'_, Recorded> {
    m.lock()
}

#[derive(Clone, Copy)]
enum Kind {
    Depth(Option<i32>),
    Adds,
    Retries,
    QueueDuration,
    WorkDuration,
    Unfinished,
    Longest,
}

struct Metric(Arc<Mutex<Recorded>>, Kind);

impl GaugeMetric for Metric {
    fn inc(&self) {
        if let Kind::Depth(p) = self.1 {
            *lock(&self.0).depth.entry(p).or_default() += 1;
        }
    }
    fn dec(&self) {
        if let Kind::Depth(p) = self.1 {
            *lock(&self.0).depth.entry(p).or_default() -= 1;
        }
    }
}

impl CounterMetric for Metric {
    fn inc(&self) {
        let mut r = lock(&self.0);
        match self.1 {
            Kind::Adds => r.adds += 1,
            Kind::Retries => r.retries += 1,
            _ => {}
        }
    }
}

impl HistogramMetric for Metric {
    fn observe(&self, value: f64) {
        let mut r = lock(&self.0);
        match self.1 {
            Kind::QueueDuration => r.queue_durations.push(value),
            Kind::WorkDuration => r.work_durations.push(value),
            _ => {}
        }
    }
}

impl SettableGaugeMetric for Metric {
    fn set(&self, value: f64) {
        let mut r = lock(&self.0);
        match self.1 {
            Kind::Unfinished => r.unfinished_work_seconds = value,
            Kind::Longest => r.longest_running_processor_seconds = value,
            _ => {}
        }
    }
}

impl RecordingProvider {
    fn metric(&self, kind: Kind) -> Arc<Metric> {
        Arc::new(Metric(self.recorded.clone(), kind))
    }
}

impl MetricsProvider for RecordingProvider {
    fn depth(&self, _: &str) -> Arc<dyn GaugeMetric> {
        self.metric(Kind::Depth(None))
    }
    fn depth_for_priority(&self, _: &str, priority: i32) -> Arc<dyn GaugeMetric> {
        self.metric(Kind::Depth(Some(priority)))
    }
    fn adds(&self, _: &str) -> Arc<dyn CounterMetric> {
        self.metric(Kind::Adds)
    }
    fn queue_duration(&self, _: &str) -> Arc<dyn HistogramMetric> {
        self.metric(Kind::QueueDuration)
    }
    fn work_duration(&self, _: &str) -> Arc<dyn HistogramMetric> {
        self.metric(Kind::WorkDuration)
    }
    fn unfinished_work_seconds(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        self.metric(Kind::Unfinished)
    }
    fn longest_running_processor_seconds(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        self.metric(Kind::Longest)
    }
    fn retries(&self, _: &str) -> Arc<dyn CounterMetric> {
        self.metric(Kind::Retries)
    }
}
