//! Queue metrics: client-go's seven work-queue metrics behind a per-queue provider.
//!
//! A queue built with a name and a [`MetricsProvider`] asks the provider once for one handle per
//! metric (at construction; depth at the first add), then reports through those handles. Without
//! a provider nothing is recorded and no per-key bookkeeping is kept.
//!
//! | Metric | Kind | Semantics (as client-go's) |
//! |---|---|---|
//! | depth | [`GaugeMetric`] | +1 when a key becomes dirty (queued, or re-added while processing), −1 when it is handed out |
//! | adds | [`CounterMetric`] | +1 whenever depth is incremented |
//! | queue duration | [`HistogramMetric`] (seconds) | from the add that made the key dirty to the `get` that hands it out |
//! | work duration | [`HistogramMetric`] (seconds) | from the `get` to the matching `done` |
//! | unfinished work | [`SettableGaugeMetric`] (seconds) | sum of the ages of the items being processed, refreshed periodically; 0 as soon as none is |
//! | longest running processor | [`SettableGaugeMetric`] (seconds) | age of the oldest item being processed, refreshed periodically; 0 as soon as none is |
//! | oldest wait, per priority | [`SettableGaugeMetric`] (seconds) | priority queue only (ctrlq's): how long the oldest key of each priority has waited to be handed out, refreshed with the unfinished-work gauges; 0 when none waits |
//! | retries | [`CounterMetric`] | work queue: +1 for every delayed or rate-limited add that the queue accepts, a zero delay included (client-go's); priority queue: only those whose delay is above zero (controller-runtime's) |
//!
//! Depth therefore counts a key that is dirty while processing, so it can exceed the queue's
//! `len()`, and the queue duration of such a key is measured from its re-add, not from when it is
//! queued again at `done`: both as in the original.
//!
//! Unlike client-go's global `SetProvider` (first call wins, and libraries fight over it), the
//! provider here is always per queue.
//!
//! # Example
//!
//! A provider that counts adds in an atomic (the `prometheus` feature of this crate supplies a real
//! one):
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use ctrlq_queue_async::metrics::{CounterMetric, MetricsProvider, NoopMetric};
//!
//! #[derive(Debug, Default)]
//! struct Adds(AtomicU64);
//! impl CounterMetric for Adds {
//!     fn inc(&self) {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!     }
//! }
//!
//! #[derive(Debug, Default)]
//! struct CountAdds(Arc<Adds>);
//! impl MetricsProvider for CountAdds {
//!     fn adds(&self, _name: &str) -> Arc<dyn CounterMetric> {
//!         self.0.clone()
//!     }
//!     // Every other metric falls back to the provided no-op default.
//! }
//!
//! let provider = CountAdds::default();
//! let adds = provider.adds("my-controller");
//! adds.inc();
//! assert_eq!(provider.0.0.load(Ordering::Relaxed), 1);
//! # let _ = NoopMetric;
//! ```

mod provider;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;

use std::hash::Hash;
use std::sync::Arc;

use hashbrown::HashMap;
use tokio::time::Instant;

use crate::timer::QueueClock;

pub use provider::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, NoopMetric, NoopProvider,
    SettableGaugeMetric, UNFINISHED_WORK_UPDATE_PERIOD,
};

/// The recorder of a queue, called under the queue's lock: client-go's `queueMetrics`. A queue
/// without metrics has none (see [`Recorder::new`]).
///
/// It holds the metric handles of its queue, each asked of its provider once: when the queue
/// is built, except the depth gauges, asked for at their first use (so a priority queue, which
/// labels depth by priority, does not export an idle unlabelled series). It keeps, per key,
/// when it became dirty and when it was handed out, and drops both at `done`, so no clone of a
/// key outlives its processing.
pub(crate) struct Recorder<K> {
    name: String,
    provider: Arc<dyn MetricsProvider>,
    depth: Option<Depth>,
    /// The depth gauge of each priority seen so far (priority queue only).
    priority_depth: HashMap<i32, Depth>,
    adds: Arc<dyn CounterMetric>,
    queue_duration: Arc<dyn HistogramMetric>,
    work_duration: Arc<dyn HistogramMetric>,
    unfinished: Arc<dyn SettableGaugeMetric>,
    longest: Arc<dyn SettableGaugeMetric>,
    retries: Arc<dyn CounterMetric>,
    /// The oldest-wait gauge of each priority seen so far (priority queue only).
    oldest_wait: HashMap<i32, Arc<dyn SettableGaugeMetric>>,
    /// When each dirty key became dirty, and its priority (priority queue only).
    add_times: HashMap<K, (Instant, Option<i32>)>,
    start_times: HashMap<K, Instant>,
}

/// A depth gauge and how much of its value this recorder put there: what it still counts when
/// its queue is dropped comes off the gauge, so a queue that goes away with keys queued (a
/// controller's term that ended) leaves no phantom depth in a series the next queue reuses.
struct Depth {
    gauge: Arc<dyn GaugeMetric>,
    count: u64,
}

impl Depth {
    fn new(gauge: Arc<dyn GaugeMetric>) -> Self {
        Self { gauge, count: 0 }
    }

    fn inc(&mut self) {
        self.count += 1;
        self.gauge.inc();
    }

    fn dec(&mut self) {
        self.count = self.count.saturating_sub(1);
        self.gauge.dec();
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        for _ in 0..self.count {
            self.gauge.dec();
        }
    }
}

impl<K: Hash + Eq + Clone> Recorder<K> {
    /// A recorder for queue `name` reporting through `provider`; none without one or with an
    /// empty name (as client-go): then nothing is kept or recorded.
    pub(crate) fn new(name: &str, provider: Option<Arc<dyn MetricsProvider>>) -> Option<Box<Self>> {
        provider.filter(|_| !name.is_empty()).map(|provider| {
            Box::new(Recorder {
                name: name.to_owned(),
                depth: None,
                priority_depth: HashMap::new(),
                adds: provider.adds(name),
                queue_duration: provider.queue_duration(name),
                work_duration: provider.work_duration(name),
                unfinished: provider.unfinished_work_seconds(name),
                longest: provider.longest_running_processor_seconds(name),
                retries: provider.retries(name),
                provider,
                oldest_wait: HashMap::new(),
                add_times: HashMap::new(),
                start_times: HashMap::new(),
            })
        })
    }

    /// `key` became dirty (queued, or re-added while processing).
    #[cfg(test)]
    pub(crate) fn add(&mut self, key: &K) {
        self.add_at_priority(key, None, &QueueClock::new());
    }

    /// `key` became dirty at `priority` (priority queue: depth per priority). Times are read
    /// from the queue's `clock`, as are all of this recorder's.
    pub(crate) fn add_at_priority(&mut self, key: &K, priority: Option<i32>, clock: &QueueClock) {
        self.adds.inc();
        self.depth(priority).inc();
        if let Some(p) = priority {
            self.oldest_wait(p);
        }
        if !self.add_times.contains_key(key) {
            self.add_times.insert(key.clone(), (clock.now(), priority));
        }
    }

    /// A dirty `key` moved from one priority's depth to another's (priority raise).
    pub(crate) fn reprioritize(&mut self, key: Option<&K>, from: i32, to: i32) {
        if from != to {
            self.depth(Some(from)).dec();
            self.depth(Some(to)).inc();
            self.oldest_wait(to);
            if let Some((_, p)) = key.and_then(|k| self.add_times.get_mut(k)) {
                *p = Some(to);
            }
        }
    }

    /// `key` was handed out to a worker.
    #[cfg(test)]
    pub(crate) fn get(&mut self, key: &K) {
        self.get_at_priority(key, None, &QueueClock::new());
    }

    /// `key`, dirty at `priority`, was handed out to a worker.
    pub(crate) fn get_at_priority(&mut self, key: &K, priority: Option<i32>, clock: &QueueClock) {
        self.depth(priority).dec();
        let now = clock.now();
        self.start_times.insert(key.clone(), now);
        if let Some((added, _)) = self.add_times.remove(key) {
            self.queue_duration
                .observe(now.saturating_duration_since(added).as_secs_f64());
        }
    }

    /// The worker finished `key`. When it was the last key in progress, the unfinished-work
    /// gauges read 0 now rather than at the next refresh, which never comes once the queue is
    /// shut down.
    pub(crate) fn done(&mut self, key: &K, clock: &QueueClock) {
        let Some(started) = self.start_times.remove(key) else {
            return;
        };
        self.work_duration
            .observe(clock.now().saturating_duration_since(started).as_secs_f64());
        if self.start_times.is_empty() {
            self.set_unfinished_work(0.0, 0.0);
        }
    }

    /// A delayed or rate-limited add was accepted.
    pub(crate) fn retry(&self) {
        self.retries.inc();
    }

    /// Sets the unfinished-work gauge to the sum of the ages of the items in progress, and the
    /// longest-running gauge to the oldest age (seconds).
    pub(crate) fn update_unfinished_work(&self, clock: &QueueClock) {
        let now = clock.now();
        let (mut total, mut longest) = (0.0, 0.0_f64);
        for started in self.start_times.values() {
            let age = now.saturating_duration_since(*started).as_secs_f64();
            total += age;
            longest = longest.max(age);
        }
        self.set_unfinished_work(total, longest);
        if !self.oldest_wait.is_empty() {
            let mut oldest: HashMap<i32, Instant> = HashMap::new();
            for (added, priority) in self.add_times.values() {
                if let Some(p) = priority {
                    let at = oldest.entry(*p).or_insert(*added);
                    *at = (*at).min(*added);
                }
            }
            for (p, gauge) in &self.oldest_wait {
                let age = oldest
                    .get(p)
                    .map_or(0.0, |at| now.saturating_duration_since(*at).as_secs_f64());
                gauge.set(age);
            }
        }
    }
}

impl<K> Recorder<K> {
    /// The depth gauge of `priority` (`None`: the unlabelled one), asked of the provider at
    /// its first use.
    fn depth(&mut self, priority: Option<i32>) -> &mut Depth {
        let Self {
            name,
            provider,
            depth,
            priority_depth,
            ..
        } = self;
        match priority {
            None => depth.get_or_insert_with(|| Depth::new(provider.depth(name))),
            Some(p) => priority_depth
                .entry(p)
                .or_insert_with(|| Depth::new(provider.depth_for_priority(name, p))),
        }
    }

    /// The oldest-wait gauge of `priority`, asked of the provider at its first use.
    fn oldest_wait(&mut self, priority: i32) {
        let Self {
            name,
            provider,
            oldest_wait,
            ..
        } = self;
        oldest_wait
            .entry(priority)
            .or_insert_with(|| provider.oldest_wait_for_priority(name, priority));
    }

    fn set_unfinished_work(&self, total: f64, longest: f64) {
        self.unfinished.set(total);
        self.longest.set(longest);
    }
}

impl<K> Drop for Recorder<K> {
    /// Items still in progress when the queue goes are no longer anybody's unfinished work,
    /// and the keys still queued no longer wait.
    fn drop(&mut self) {
        if !self.start_times.is_empty() {
            self.set_unfinished_work(0.0, 0.0);
        }
        for gauge in self.oldest_wait.values() {
            gauge.set(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::RecordingProvider;
    use super::*;
    use std::time::Duration;

    /// client-go's `TestMetrics`, driven through the recorder in the order the queue calls it.
    #[tokio::test(start_paused = true)]
    async fn client_go_metrics_sequence() {
        let p = Arc::new(RecordingProvider::default());
        let mut r = Recorder::new("test", Some(p.clone())).expect("enabled");
        let step = |d| tokio::time::advance(d);
        let clock = QueueClock::new();

        r.add(&"foo"); // Add(foo)
        let seen = p.recorded();
        assert_eq!((seen.adds, seen.depth[&None]), (1, 1));
        step(Duration::from_micros(50)).await;
        r.get(&"foo");
        assert_eq!(p.recorded().queue_durations, [5e-5]);
        // Add(foo) x5 while processing: only the first makes the key dirty, and the queue reports
        // only that one.
        r.add(&"foo");
        let seen = p.recorded();
        assert_eq!((seen.adds, seen.depth[&None]), (2, 1));
        step(Duration::from_micros(25)).await;
        r.done(&"foo", &clock);
        assert_eq!(p.recorded().work_durations, [2.5e-5]);
        assert_eq!(p.recorded().depth[&None], 1);
        r.get(&"foo");
        assert_eq!(p.recorded().queue_durations, [5e-5, 2.5e-5]);
        step(Duration::from_millis(1)).await;
        r.update_unfinished_work(&clock);
        let seen = p.recorded();
        assert_eq!(seen.unfinished_work_seconds, 0.001);
        assert_eq!(seen.longest_running_processor_seconds, 0.001);
        r.done(&"foo", &clock);
        assert_eq!(p.recorded().work_durations, [2.5e-5, 0.001]);
        r.retry();
        assert_eq!(p.recorded().retries, 1);
        // Nothing about `foo` is retained after done.
        assert!(r.add_times.is_empty() && r.start_times.is_empty());
    }

    #[test]
    fn empty_name_disables() {
        let p = Arc::new(RecordingProvider::default());
        assert!(Recorder::<u32>::new("", Some(p.clone())).is_none());
        assert_eq!(p.recorded().adds, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn priority_depth_moves_between_labels() {
        let p = Arc::new(RecordingProvider::default());
        let mut r = Recorder::new("q", Some(p.clone())).expect("enabled");
        let clock = QueueClock::new();
        r.add_at_priority(&"a", Some(0), &clock);
        r.add_at_priority(&"b", Some(0), &clock);
        r.reprioritize(Some(&"b"), 0, 5);
        r.get_at_priority(&"b", Some(5), &clock);
        let depth = p.recorded().depth;
        assert_eq!(depth[&Some(0)], 1);
        assert_eq!(depth[&Some(5)], 0);
        assert!(
            !depth.contains_key(&None),
            "no unlabelled series for a priority queue"
        );
    }
}
