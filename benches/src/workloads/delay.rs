//! `delay`: n keys added with delays uniform in [0, spread] (splitmix64 mod (spread_ms·10⁶ + 1)
//! ns; `--spread-ms`, default 1,000); one consumer measures each key's lateness against its
//! deadline.
//!
//! Keys are `Arc<str>` (see `fifo`). The consumer finds key i's deadline by reading i back from
//! the key (`ns-…/obj-<i>`): the key's bytes are in cache after the queue hashed it, where a
//! lookup in a 100,000-key index costs a cache miss per item, a fifth of the measured CPU. The
//! deadlines are atomics, so producer and consumer share no lock of the harness's own.
//!
//! The floor: after the measured run, a fresh runtime of the same shape runs the timer mechanism
//! alone, a bare `tokio_util::time::DelayQueue` owned by one task, fed the same deadlines and
//! drained by that task (no work queue, no hand-off). Its lateness is reported next to ours as
//! `floor_lateness_ms`: tokio rounds each deadline up to its 1 ms tick, `DelayQueue` rounds up to
//! its own 1 ms grid first, and the driver parks in whole milliseconds, so no queue built on them
//! can be on time more often than this. `tokio_floor_lateness_ms` is tokio's timer alone: one
//! task sleeping until each deadline in turn, sorted in advance (its rounding and its parking in
//! whole milliseconds): the floor of anything timed by tokio's timer.
//! `handoff_floor_lateness_ms` is the bare `DelayQueue` again, but its task hands each expired
//! deadline over an unbounded channel to a second task that records the lateness when it
//! receives it: the floor of any design where the timers' task and the consumer are two tasks,
//! as a work queue's delay task and its `get` are (the wake-up of the consumer, often on the
//! other core, is in it; the work queue's lock is not).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctrlq_queue_async::WorkQueue;
use futures::StreamExt;
use tokio_util::time::DelayQueue;

use crate::common::{Extra, Overrides, Params, Report, SplitMix64, cpu_time, percentile, runtime};

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let keys = super::fifo::shared_keys(params.n);
    let mut rng = SplitMix64::new(params.seed);
    let delays: Vec<Duration> = (0..params.n)
        .map(|_| Duration::from_nanos(rng.next() % (params.spread_ms * 1_000_000 + 1)))
        .collect();
    let floor_cpu0 = cpu_time();
    let floor = floor_lateness(&delays);
    let floor_cpu_s = (cpu_time() - floor_cpu0).as_secs_f64();
    let tokio_floor = tokio_floor_lateness(&delays);
    let handoff_floor = floor_with_handoff(&delays);
    runtime().block_on(async move {
        let queue: WorkQueue<Arc<str>> = WorkQueue::new();
        // Deadline i in nanoseconds after `base`, stored before key i is added.
        let base = tokio::time::Instant::now();
        let deadlines: Arc<Vec<AtomicU64>> =
            Arc::new((0..keys.len()).map(|_| AtomicU64::new(u64::MAX)).collect());
        let n = params.n as usize;
        let consumer = {
            let (queue, deadlines) = (queue.clone(), deadlines.clone());
            tokio::spawn(async move {
                let mut lateness = Vec::with_capacity(n);
                while lateness.len() < n {
                    let item = queue.get().await.expect("the queue is open");
                    let now = tokio::time::Instant::now();
                    let i = index_of(item.key());
                    // The queue's lock orders this load after the producer's store.
                    let at = deadlines[i].load(Ordering::Relaxed);
                    assert_ne!(at, u64::MAX, "the deadline is stored before the add");
                    let deadline = base + Duration::from_nanos(at);
                    lateness.push(now.saturating_duration_since(deadline).as_secs_f64() * 1e3);
                    item.done();
                }
                lateness
            })
        };
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        // The main task runs on the runtime's 2 workers, as Go's main goroutine runs on its 2
        // Ps, not on the thread blocked on the runtime: that third busy thread on 2 cores was
        // preempted by the OS for milliseconds during the burst of adds, and items due then
        // were late by as much (p99 7-16 ms, against 3-4 ms this way, same session). Like any
        // long tokio loop it yields cooperatively (`consume_budget`, every 128 adds or so).
        let producer = tokio::spawn({
            let (queue, deadlines) = (queue.clone(), deadlines.clone());
            async move {
                for (i, (k, d)) in keys.iter().zip(&delays).enumerate() {
                    let deadline = tokio::time::Instant::now() + *d;
                    let at = u64::try_from((deadline - base).as_nanos()).unwrap_or(u64::MAX - 1);
                    deadlines[i].store(at, Ordering::Relaxed);
                    queue.add_after(k.clone(), *d).expect("the queue is open");
                    tokio::task::consume_budget().await;
                }
                t0.elapsed().as_secs_f64()
            }
        });
        let add_s = producer.await.expect("the producer panicked");
        let mut lateness = consumer.await.expect("the consumer panicked");
        let seconds = t0.elapsed().as_secs_f64();
        let cpu_s = (cpu_time() - cpu0).as_secs_f64();
        queue.shut_down();
        lateness.sort_by(f64::total_cmp);
        let avg = lateness.iter().sum::<f64>() / lateness.len() as f64;
        Report {
            workload: "delay",
            params,
            seconds,
            ops_per_sec: params.n as f64 / seconds,
            extra: vec![
                ("ok", Extra::Bool(lateness.len() == n)),
                ("cpu_s", Extra::Num(cpu_s)),
                ("add_seconds", Extra::Num(add_s)),
                ("lateness_ms", summary(&lateness, Some(avg))),
                ("floor_cpu_s", Extra::Num(floor_cpu_s)),
                ("floor_lateness_ms", summary(&floor, None)),
                ("tokio_floor_lateness_ms", summary(&tokio_floor, None)),
                ("handoff_floor_lateness_ms", summary(&handoff_floor, None)),
            ],
        }
    })
}

/// Min, p50, p99, max (and the mean if given) of `sorted` (non-empty).
fn summary(sorted: &[f64], avg: Option<f64>) -> Extra {
    let mut fields = vec![
        ("min", sorted[0]),
        ("p50", percentile(sorted, 50.0)),
        ("p99", percentile(sorted, 99.0)),
        ("max", sorted[sorted.len() - 1]),
    ];
    fields.extend(avg.map(|a| ("avg", a)));
    Extra::Obj(fields)
}

/// The index `i` of the key `ns-…/obj-<i>`.
fn index_of(key: &str) -> usize {
    key.rsplit_once("obj-")
        .and_then(|(_, i)| i.parse().ok())
        .expect("keys end with obj-<i>")
}

/// The lateness (ms, sorted) of a bare `DelayQueue` given `delays`: see the module docs.
///
/// Shaped like the measured run: a producer task computes each deadline and sends it over an
/// unbounded channel; the timer task inserts what arrives and records each expiry on the spot.
fn floor_lateness(delays: &[Duration]) -> Vec<f64> {
    let delays = delays.to_vec();
    let n = delays.len();
    let mut lateness = runtime().block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let timer = tokio::spawn(async move {
            let mut timers = DelayQueue::with_capacity(n);
            let mut lateness = Vec::with_capacity(n);
            while lateness.len() < n {
                tokio::select! {
                    biased;
                    Some(expired) = timers.next(), if !timers.is_empty() => {
                        let deadline: tokio::time::Instant = expired.into_inner();
                        let late = tokio::time::Instant::now().saturating_duration_since(deadline);
                        lateness.push(late.as_secs_f64() * 1e3);
                    }
                    Some(deadline) = rx.recv() => {
                        timers.insert_at(deadline, deadline);
                    }
                }
            }
            lateness
        });
        for d in &delays {
            tx.send(tokio::time::Instant::now() + *d)
                .expect("the timer task is running");
            tokio::task::consume_budget().await;
        }
        timer.await.expect("the floor task panicked")
    });
    lateness.sort_by(f64::total_cmp);
    lateness
}

/// The lateness (ms, sorted) of a bare `DelayQueue` whose task hands each expired deadline to a
/// consumer task: see the module docs. The producer is shaped as in [`floor_lateness`].
fn floor_with_handoff(delays: &[Duration]) -> Vec<f64> {
    let delays = delays.to_vec();
    let n = delays.len();
    let mut lateness = runtime().block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (due_tx, mut due_rx) = tokio::sync::mpsc::unbounded_channel();
        let consumer = tokio::spawn(async move {
            let mut lateness = Vec::with_capacity(n);
            while lateness.len() < n {
                let deadline: tokio::time::Instant =
                    due_rx.recv().await.expect("the timer task is running");
                let late = tokio::time::Instant::now().saturating_duration_since(deadline);
                lateness.push(late.as_secs_f64() * 1e3);
            }
            lateness
        });
        let timer = tokio::spawn(async move {
            let mut timers = DelayQueue::with_capacity(n);
            let mut handed = 0;
            while handed < n {
                tokio::select! {
                    biased;
                    Some(expired) = timers.next(), if !timers.is_empty() => {
                        handed += 1;
                        if due_tx.send(expired.into_inner()).is_err() {
                            return;
                        }
                    }
                    Some(deadline) = rx.recv() => {
                        timers.insert_at(deadline, deadline);
                    }
                }
            }
        });
        for d in &delays {
            tx.send(tokio::time::Instant::now() + *d)
                .expect("the timer task is running");
            tokio::task::consume_budget().await;
        }
        timer.await.expect("the floor's timer task panicked");
        consumer.await.expect("the floor's consumer panicked")
    });
    lateness.sort_by(f64::total_cmp);
    lateness
}

/// The lateness (ms, sorted) of tokio's timer alone given `delays`: see the module docs.
///
/// One task sleeps until each deadline in turn (sorted in advance) and records every deadline
/// that has passed when it wakes: no producer, no second timer, nothing but tokio's rounding,
/// its parking and the task's wake-up.
fn tokio_floor_lateness(delays: &[Duration]) -> Vec<f64> {
    let mut delays = delays.to_vec();
    delays.sort_unstable();
    let mut lateness = runtime().block_on(async move {
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut lateness = Vec::with_capacity(delays.len());
            let mut next = 0;
            while let Some(&delay) = delays.get(next) {
                tokio::time::sleep_until(start + delay).await;
                let now = tokio::time::Instant::now();
                while let Some(&delay) = delays.get(next)
                    && start + delay <= now
                {
                    lateness.push((now - (start + delay)).as_secs_f64() * 1e3);
                    next += 1;
                }
            }
            lateness
        })
        .await
        .expect("the floor task panicked")
    });
    lateness.sort_by(f64::total_cmp);
    lateness
}
