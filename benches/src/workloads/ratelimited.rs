//! `ratelimited-exp` and `ratelimited-default`: `when` over K keys, then `forget` each key.
//!
//! Single-threaded figures come from one thread doing all n calls; the contended figures from
//! 2 threads sharing one limiter, each doing n / 2 calls over all keys (offset by half the keys so
//! they mostly touch different keys at any instant, as two queue workers would). A third run gives
//! each of the 2 threads a private limiter (`ns_per_when_2threads_private`): nothing is shared, so
//! it is the machine's own 2-thread floor, and the gap to the contended figure is the cost of
//! sharing the per-key state and the bucket between cores.
//!
//! `ratelimited-exp` also measures its floor, `floor_ns_per_when`: client-go's per-item
//! exponential limiter as it stands (a failure count per key in one hash map behind one mutex;
//! the backoff is the base doubled per earlier failure, capped) in Rust, with the limiter's lock
//! and hasher and nothing else (no bound on the number of keys), called as ours is, through the
//! `RateLimiter` trait object. Every per-item
//! limiter whose state is a map behind one lock does at least this per call, so its time bounds
//! what `ns_per_when` can reach on the same machine; `floor_ns_per_forget` is the same for
//! `forget`, which frees the key's copy as it removes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctrlq_ratelimit::{RateLimiter, default_controller_rate_limiter};
use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::common::{Extra, Overrides, Params, Report, cpu_time, key};

/// The defaults of both workloads: n = 1,000,000 calls, keys = 10,000.
fn defaults() -> Params {
    Params {
        keys: 10_000,
        ..Params::defaults()
    }
}

/// Runs `ratelimited-exp`: the per-item exponential limiter (5 ms, 1000 s).
pub fn run_exp(flags: &Overrides) -> Report {
    let mut report = run("ratelimited-exp", flags, || {
        Arc::new(
            ctrlq_ratelimit::ExponentialRateLimiter::new(
                Duration::from_millis(5),
                Duration::from_secs(1000),
            )
            .expect("valid parameters"),
        )
    });
    let (n, k) = (report.params.n as usize, report.params.keys.max(1) as usize);
    let keys: Vec<String> = (0..k as u64).map(key).collect();
    let floor = Arc::new(FloorLimiter::new(
        Duration::from_millis(5),
        Duration::from_secs(1000),
    ));
    // Called as ours is: through the trait object.
    let limiter: Arc<dyn RateLimiter<String>> = floor.clone();
    let start = Instant::now();
    for i in 0..n {
        std::hint::black_box(limiter.when(&keys[i % k]));
    }
    let floor_s = start.elapsed().as_secs_f64();
    // The floor keeps the count it was given: every key was called n / K times.
    let counted: u64 = floor.failures.lock().values().map(|&c| u64::from(c)).sum();
    assert_eq!(counted, n as u64, "the floor lost calls");
    let start = Instant::now();
    for key in &keys {
        limiter.forget(key);
    }
    let floor_forget_s = start.elapsed().as_secs_f64();
    assert!(floor.failures.lock().is_empty(), "the floor kept a key");
    report.extra.push((
        "floor_ns_per_when",
        Extra::Num(floor_s * 1e9 / n.max(1) as f64),
    ));
    report.extra.push((
        "floor_ns_per_forget",
        Extra::Num(floor_forget_s * 1e9 / k as f64),
    ));
    report
}

/// The floor of `ratelimited-exp`: see the module docs.
struct FloorLimiter {
    failures: Mutex<HashMap<String, u32>>,
    base_ns: u64,
    max_ns: u64,
}

impl FloorLimiter {
    fn new(base: Duration, max: Duration) -> Self {
        FloorLimiter {
            failures: Mutex::new(HashMap::new()),
            base_ns: base.as_nanos() as u64,
            max_ns: max.as_nanos() as u64,
        }
    }
}

impl RateLimiter<String> for FloorLimiter {
    /// The key's backoff: the base doubled once per earlier call, capped at the max.
    fn when(&self, key: &String) -> Duration {
        let exp = {
            let mut failures = self.failures.lock();
            match failures.get_mut(key.as_str()) {
                Some(count) => {
                    let exp = *count;
                    *count = exp.saturating_add(1);
                    exp
                }
                None => {
                    failures.insert(key.clone(), 1);
                    0
                }
            }
        };
        let ns = match self.base_ns.checked_shl(exp) {
            Some(ns) if ns >> exp == self.base_ns => ns.min(self.max_ns),
            _ => self.max_ns,
        };
        Duration::from_nanos(ns)
    }

    /// Drops the key's count (and the key's allocation with it).
    fn forget(&self, key: &String) {
        self.failures.lock().remove(key.as_str());
    }

    fn num_requeues(&self, key: &String) -> usize {
        self.failures
            .lock()
            .get(key.as_str())
            .map_or(0, |&c| c as usize)
    }
}

/// Runs `ratelimited-default`: the default controller limiter.
pub fn run_default(flags: &Overrides) -> Report {
    run("ratelimited-default", flags, || {
        Arc::new(default_controller_rate_limiter::<String>())
    })
}

fn run(
    id: &'static str,
    flags: &Overrides,
    make: impl Fn() -> Arc<dyn RateLimiter<String>> + Sync,
) -> Report {
    let params = flags.resolve(defaults());
    let keys: Arc<Vec<String>> = Arc::new((0..params.keys.max(1)).map(key).collect());
    let k = keys.len();
    let n = params.n as usize;
    let cpu0 = cpu_time();

    // Single thread.
    let limiter = make();
    let start = Instant::now();
    for i in 0..n {
        std::hint::black_box(limiter.when(&keys[i % k]));
    }
    let when_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for key in keys.iter() {
        limiter.forget(key);
    }
    let forget_s = start.elapsed().as_secs_f64();
    let ok = keys.iter().all(|key| limiter.num_requeues(key) == 0);

    // Two contending threads.
    let limiter = make();
    let when2_s = two_threads([limiter.clone(), limiter.clone()], &keys, n);
    for key in keys.iter() {
        limiter.forget(key);
    }
    let ok2 = keys.iter().all(|key| limiter.num_requeues(key) == 0);

    // The machine's own 2-thread floor: the same calls, each thread with a private limiter, so
    // nothing is shared. The contended figure can be no better than this.
    let private2_s = two_threads([make(), make()], &keys, n);

    let per_call = |s: f64, calls: usize| s * 1e9 / calls.max(1) as f64;
    Report {
        workload: id,
        params,
        seconds: when_s + forget_s,
        ops_per_sec: n as f64 / when_s,
        extra: vec![
            ("ns_per_when", Extra::Num(per_call(when_s, n))),
            ("ns_per_forget", Extra::Num(per_call(forget_s, k))),
            // Wall time per call of each of the 2 threads, and the pair's combined rate.
            ("ns_per_when_2threads", Extra::Num(per_call(when2_s, n / 2))),
            (
                "ns_per_when_2threads_private",
                Extra::Num(per_call(private2_s, n / 2)),
            ),
            (
                "ops_per_sec_2threads",
                Extra::Num((n / 2 * 2) as f64 / when2_s),
            ),
            ("ok", Extra::Bool(ok && ok2)),
            ("cpu_s", Extra::Num((cpu_time() - cpu0).as_secs_f64())),
        ],
    }
}

/// Seconds for 2 threads, thread t calling `when` n / 2 times through `limiters[t]`, over all
/// keys from offset t · K / 2 (so they mostly touch different keys at any instant).
fn two_threads(
    limiters: [Arc<dyn RateLimiter<String>>; 2],
    keys: &Arc<Vec<String>>,
    n: usize,
) -> f64 {
    let k = keys.len();
    let start = Instant::now();
    let threads: Vec<_> = limiters
        .into_iter()
        .enumerate()
        .map(|(t, limiter)| {
            let keys = keys.clone();
            std::thread::spawn(move || {
                for i in 0..n / 2 {
                    std::hint::black_box(limiter.when(&keys[(i + t * k / 2) % k]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("bench thread");
    }
    start.elapsed().as_secs_f64()
}
