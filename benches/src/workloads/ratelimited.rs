//! `ratelimited-exp` and `ratelimited-default`: `when` over K keys, then `forget` each key.
//!
//! Single-threaded figures come from one thread doing all n calls; the contended figures from
//! 2 threads sharing one limiter, each doing n / 2 calls over all keys (offset by half the keys so
//! they mostly touch different keys at any instant, as two queue workers would). A third run gives
//! each of the 2 threads a private limiter (`ns_per_when_2threads_private`): nothing is shared, so
//! it is the machine's own 2-thread floor, and the gap to the contended figure is the cost of
//! sharing the per-key state and the bucket between cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctrlq_ratelimit::{RateLimiter, default_controller_rate_limiter};

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
    run("ratelimited-exp", flags, || {
        Arc::new(
            ctrlq_ratelimit::ExponentialRateLimiter::new(
                Duration::from_millis(5),
                Duration::from_secs(1000),
            )
            .expect("valid parameters"),
        )
    })
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
