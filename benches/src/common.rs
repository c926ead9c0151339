//! What every workload shares: parameters, keys, the seeded generator, CPU time and the report.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Parameters of one workload run, as given on the `wqbench` command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Number of items, calls or adds (meaning per workload).
    pub n: u64,
    /// Worker tasks.
    pub workers: u64,
    /// Producer tasks.
    pub producers: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Seed of the splitmix64 sequences.
    pub seed: u64,
    /// Delays of the `delay` workload are uniform in [0, spread_ms] milliseconds.
    pub spread_ms: u64,
}

impl Params {
    /// The defaults shared by most workloads; each workload overrides what it defines.
    pub const fn defaults() -> Self {
        Params {
            n: 1_000_000,
            workers: 4,
            producers: 4,
            keys: 1_000,
            seed: 1,
            spread_ms: 1_000,
        }
    }
}

/// The splitmix64 generator of `WORKLOADS.md`, so that the Go side draws the same numbers.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `state`.
    pub const fn new(state: u64) -> Self {
        SplitMix64 { state }
    }

    /// The next number of the sequence.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The workload key for index `i`: `"ns-<i % 100>/obj-<i>"`.
pub fn key(i: u64) -> String {
    format!("ns-{}/obj-{}", i % 100, i)
}

/// Process user + system CPU time so far (`getrusage(RUSAGE_SELF)`).
pub fn cpu_time() -> Duration {
    let usage = usage();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::new(
            t.tv_sec().max(0) as u64,
            (t.tv_usec().max(0) as u32) * 1_000,
        )
    };
    tv(usage.user_time()) + tv(usage.system_time())
}

/// Minor page faults of the process so far (`getrusage(RUSAGE_SELF)`): first touches of
/// memory the allocator took fresh from the OS.
pub fn minor_faults() -> u64 {
    u64::try_from(usage().minor_page_faults()).unwrap_or(0)
}

fn usage() -> nix::sys::resource::Usage {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage(RUSAGE_SELF) cannot fail on Linux")
}

/// CPU time the hypervisor ran other guests on this machine's CPUs while they were ready to run
/// ours ("steal" in `/proc/stat`), summed over the CPUs; `None` where that file cannot be read.
///
/// Timings taken while this grows are the host's, not the code's: on a 2-vCPU machine,
/// `sched-backoff` p99 was 1.7 ms in a run with 0.06 s stolen and 381 ms in one with 1.76 s
/// stolen.
pub fn steal_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))?
        .split_whitespace()
        .nth(8)?
        .parse()
        .ok()?;
    // `/proc/stat` counts in USER_HZ: 100 per second on x86-64 and arm64.
    Some(Duration::from_millis(ticks * 10))
}

/// The resident set size of the process now, in bytes (`/proc/self/statm`); `None` where that
/// file cannot be read.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // The page size of x86-64 and of arm64 as Debian builds it.
    Some(pages * 4096)
}

/// Peak resident set size of the process in bytes (`ru_maxrss`).
pub fn max_rss_bytes() -> u64 {
    (usage().max_rss().max(0) as u64) * 1024
}

/// The worker threads of the workloads' runtime: 2 unless `wqbench --threads` set another.
static THREADS: AtomicUsize = AtomicUsize::new(2);

/// Sets the worker threads of every runtime [`runtime`] builds from now on (`wqbench
/// --threads N`, for the many-core widths; the Go peer runs the same width with
/// `GOMAXPROCS=N`). Zero is taken as 1.
pub fn set_threads(threads: usize) {
    THREADS.store(threads.max(1), Ordering::Relaxed);
}

/// The worker threads [`runtime`] gives its runtime.
pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// A work queue for the throughput workloads.
pub fn work_queue<K: std::hash::Hash + Eq + Clone + Send + Sync + 'static>()
-> ctrlq_queue_async::WorkQueue<K> {
    ctrlq_queue_async::WorkQueue::new()
}

/// A multi-thread tokio runtime with the workloads' worker threads (2 by default, see
/// [`set_threads`]).
pub fn runtime() -> tokio::runtime::Runtime {
    runtime_with(threads())
}

/// A multi-thread tokio runtime with `threads` worker threads: the diagnostic runs compare the
/// workloads' 2 threads with 1 (the same tasks, with no cache line shared between cores).
pub fn runtime_with(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("the benchmark runtime must start")
}

/// The flags given on the command line; each workload fills the rest from its own defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--n`.
    pub n: Option<u64>,
    /// `--workers`.
    pub workers: Option<u64>,
    /// `--producers`.
    pub producers: Option<u64>,
    /// `--keys`.
    pub keys: Option<u64>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--spread-ms`.
    pub spread_ms: Option<u64>,
}

impl Overrides {
    /// `defaults` with every flag that was given applied on top.
    pub fn resolve(&self, defaults: Params) -> Params {
        Params {
            n: self.n.unwrap_or(defaults.n),
            workers: self.workers.unwrap_or(defaults.workers),
            producers: self.producers.unwrap_or(defaults.producers),
            keys: self.keys.unwrap_or(defaults.keys),
            seed: self.seed.unwrap_or(defaults.seed),
            spread_ms: self.spread_ms.unwrap_or(defaults.spread_ms),
        }
    }
}

/// Starts counting the queues' wake-ups (the `wake-counts` feature; nothing without it): the
/// first call installs the counting subscriber for the whole process.
pub fn wake_counts_start() {
    #[cfg(feature = "wake-counts")]
    wake_counts::start();
}

/// With the `wake-counts` feature, the queues' counts since [`wake_counts_start`] per item handed
/// out, as `extra` entries: `wakes_per_item`, `empty_wakes_per_item`, `parks_per_item`,
/// `contended_locks_per_item`. Without it, none.
pub fn wake_counts_extra() -> Vec<(&'static str, Extra)> {
    #[cfg(feature = "wake-counts")]
    {
        let [wakes, empty_wakes, parks, hand_outs, contended_locks] = wake_counts::snapshot();
        let per_item = |n: u64| Extra::Num(n as f64 / hand_outs.max(1) as f64);
        vec![
            ("wakes_per_item", per_item(wakes)),
            ("empty_wakes_per_item", per_item(empty_wakes)),
            ("parks_per_item", per_item(parks)),
            ("contended_locks_per_item", per_item(contended_locks)),
        ]
    }
    #[cfg(not(feature = "wake-counts"))]
    Vec::new()
}

/// The `wake-counts` feature: a subscriber that counts the queues' `TRACE` events under
/// `ctrlq_queue_async::wakes` by name, and sees no other event.
#[cfg(feature = "wake-counts")]
pub mod wake_counts {
    use std::sync::atomic::{AtomicU64, Ordering};

    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// The events counted, in the order of [`snapshot`]'s counts.
    pub const NAMES: [&str; 5] = ["wake", "empty_wake", "park", "hand_out", "contended_lock"];
    static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

    /// The counting subscriber.
    #[derive(Debug)]
    pub struct Counter;

    impl Subscriber for Counter {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target() == "ctrlq_queue_async::wakes"
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let name = event.metadata().name();
            if let Some(i) = NAMES.iter().position(|n| *n == name) {
                COUNTS[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// Installs the subscriber for the whole process (once) and zeroes the counts.
    pub fn start() {
        let _ = tracing::subscriber::set_global_default(Counter);
        for count in &COUNTS {
            count.store(0, Ordering::Relaxed);
        }
    }

    /// The counts since [`start`], in the order of [`NAMES`].
    pub fn snapshot() -> [u64; 5] {
        COUNTS.each_ref().map(|c| c.load(Ordering::Relaxed))
    }
}

/// One value of the `extra` object.
#[derive(Debug, Clone, PartialEq)]
pub enum Extra {
    /// A number.
    Num(f64),
    /// A boolean (the `ok` check).
    Bool(bool),
    /// A nested object, for example latency percentiles.
    Obj(Vec<(&'static str, f64)>),
}

/// The result of one workload run, printed as one JSON line.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The workload id.
    pub workload: &'static str,
    /// The parameters it ran with.
    pub params: Params,
    /// Seconds of the timed region.
    pub seconds: f64,
    /// Throughput as the workload defines it.
    pub ops_per_sec: f64,
    /// Workload figures; always carries `ok` and `cpu_s`.
    pub extra: Vec<(&'static str, Extra)>,
}

impl Report {
    /// The JSON line of `WORKLOADS.md`.
    pub fn to_json(&self) -> String {
        let p = &self.params;
        // As the Go peer does, only `delay` reports its spread.
        let spread = if self.workload == "delay" {
            format!(", \"spread_ms\": {}", p.spread_ms)
        } else {
            String::new()
        };
        let mut s = format!(
            "{{\"workload\": \"{}\", \"params\": {{\"n\": {}, \"workers\": {}, \"producers\": {}, \"keys\": {}, \"seed\": {}{spread}}}, \"seconds\": {}, \"ops_per_sec\": {}, \"extra\": {{",
            self.workload,
            p.n,
            p.workers,
            p.producers,
            p.keys,
            p.seed,
            num(self.seconds),
            num(self.ops_per_sec)
        );
        for (i, (name, value)) in self.extra.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "\"{name}\": ");
            match value {
                Extra::Num(v) => s.push_str(&num(*v)),
                Extra::Bool(b) => s.push_str(if *b { "true" } else { "false" }),
                Extra::Obj(fields) => {
                    s.push('{');
                    for (j, (k, v)) in fields.iter().enumerate() {
                        if j > 0 {
                            s.push_str(", ");
                        }
                        let _ = write!(s, "\"{k}\": {}", num(*v));
                    }
                    s.push('}');
                }
            }
        }
        s.push_str("}}");
        s
    }
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.6}")
    } else {
        "null".to_owned()
    }
}

/// Nearest-rank percentile `p` (0..=100) of sorted `values`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // Reference values of splitmix64 from state 1234567.
        let mut g = SplitMix64::new(1_234_567);
        assert_eq!(g.next(), 6_457_827_717_110_365_317);
        assert_eq!(g.next(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.0);
        assert_eq!(percentile(&v, 99.0), 4.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
    }

    #[test]
    fn keys_follow_the_contract() {
        assert_eq!(key(0), "ns-0/obj-0");
        assert_eq!(key(1234), "ns-34/obj-1234");
    }
}
