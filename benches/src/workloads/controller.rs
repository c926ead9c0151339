//! `controller`: the runner's cost over a hand-written worker loop on the same queue.
//!
//! `n` keys (100,000 by default) go through a no-op reconcile on `workers` (4) workers, once
//! through [`ctrlq_controller::Controller`] and once through a hand-written loop over a
//! [`WorkQueue`] built the same way, fed by one task as the runner's source pump is.
//!
//! The hand-written loop is the least a correct worker does, what a user would write without
//! the runner: take a key with `get`; call the reconcile `async fn` with a clone of the key and
//! await it inline (not boxed), inside `catch_unwind` so a panicking reconcile does not kill the
//! worker; on `Ok`, `forget` the item (its rate-limiter history goes, the key is done); on `Err`
//! or a panic, `requeue_rate_limited` it. It has none of the runner's extras: no attempts count
//! or context, no error policy, no stats, events, metrics or spans, no leader gating or drain.
//! Both sides' reconcile only counts the key (the runner's, the last one, also fires the
//! shutdown; the loop's shuts the queue down).
//!
//! The runner's source pump adds each burst of keys its source has ready (up to 64) under one
//! hold of the queue's lock (`WorkQueue::add_all`); the loop's feeder adds one key at a time, as
//! a loop over a stream calling `add` does. A third side, `loop_batched`, is the same loop fed
//! as the pump feeds, so that `overhead_vs_batched_loop` isolates what the runner's workers cost
//! over the loop's.
//!
//! The sides alternate inside one run, in [`PAIRS`] rounds whose order rotates every round, so
//! drift in the machine's state hits all alike. Each side is judged by its median CPU time per
//! key (the process's user + system time over the run, which counts the runtime's work on both
//! threads); `overhead` is the runner's median over the loop's, minus one.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ctrlq_controller::{Action, Context, Controller};
use ctrlq_queue_async::WorkQueue;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::common::{Extra, Overrides, Params, Report, cpu_time, percentile, runtime};

/// Rounds per run (each runs every side once).
pub const PAIRS: usize = 5;

/// Runs the workload.
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let keys = Arc::new(super::fifo::shared_keys(params.n));
    let rt = runtime();
    let mut sides: [Vec<Measured>; 3] = Default::default();
    let mut ok = true;
    for round in 0..PAIRS {
        for side in (0..3).map(|i| (round + i) % 3) {
            let m = match side {
                0 => rt.block_on(with_runner(&params, &keys)),
                1 => rt.block_on(with_loop(&params, &keys, false)),
                _ => rt.block_on(with_loop(&params, &keys, true)),
            };
            ok &= m.processed == params.n;
            sides[side].push(m);
        }
    }
    let [runner, hand, batched] = &sides;
    let per_key = |ms: &[Measured]| {
        let mut v: Vec<f64> = ms.iter().map(|m| m.cpu_s / params.n as f64).collect();
        v.sort_by(f64::total_cmp);
        percentile(&v, 50.0)
    };
    let (r, h, b) = (per_key(runner), per_key(hand), per_key(batched));
    let mut secs: Vec<f64> = runner.iter().map(|m| m.seconds).collect();
    secs.sort_by(f64::total_cmp);
    let seconds = percentile(&secs, 50.0);
    Report {
        workload: "controller",
        params,
        seconds,
        ops_per_sec: params.n as f64 / seconds,
        extra: vec![
            ("ok", Extra::Bool(ok)),
            (
                "cpu_s",
                Extra::Num(sides.iter().flatten().map(|m| m.cpu_s).sum()),
            ),
            ("pairs", Extra::Num(PAIRS as f64)),
            ("cpu_ns_per_key_runner", Extra::Num(r * 1e9)),
            ("cpu_ns_per_key_loop", Extra::Num(h * 1e9)),
            ("overhead", Extra::Num(r / h - 1.0)),
            ("cpu_ns_per_key_loop_batched", Extra::Num(b * 1e9)),
            ("overhead_vs_batched_loop", Extra::Num(r / b - 1.0)),
        ],
    }
}

/// One timed pass.
struct Measured {
    seconds: f64,
    cpu_s: f64,
    processed: u64,
}

/// The keys through the runner; the reconcile that counts the last key stops it.
async fn with_runner(params: &Params, keys: &Arc<Vec<Arc<str>>>) -> Measured {
    let processed = Arc::new(AtomicU64::new(0));
    let shutdown = CancellationToken::new();
    let (p, stop, n) = (processed.clone(), shutdown.clone(), params.n);
    let keys = keys.clone();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let controller = Controller::new("bench", move |_key: Arc<str>, _ctx: Context| {
        if p.fetch_add(1, Ordering::Relaxed) + 1 == n {
            stop.cancel();
        }
        std::future::ready(Ok::<_, Infallible>(Action::Done))
    })
    .source(move || futures::stream::iter(keys.to_vec()))
    .workers(params.workers as usize);
    let summary = tokio::spawn(controller.run(shutdown))
        .await
        .expect("the runner does not panic");
    assert_eq!(summary.reconciles, processed.load(Ordering::Relaxed));
    Measured {
        seconds: t0.elapsed().as_secs_f64(),
        cpu_s: (cpu_time() - cpu0).as_secs_f64(),
        processed: processed.load(Ordering::Relaxed),
    }
}

/// The loop's reconcile: counts the key; the last one shuts the queue down, which ends the
/// workers once it is empty.
async fn reconcile(
    _key: Arc<str>,
    processed: &AtomicU64,
    n: u64,
    queue: &WorkQueue<Arc<str>>,
) -> Result<(), Infallible> {
    if processed.fetch_add(1, Ordering::Relaxed) + 1 == n {
        queue.shut_down();
    }
    Ok(())
}

/// The keys through a hand-written loop: one feeding task (adding one key at a time, or each
/// ready burst at once if `batched`), `workers` tasks each taking a key, awaiting [`reconcile`]
/// on it inside `catch_unwind`, then forgetting the item on `Ok` and requeueing it rate-limited
/// on `Err` or a panic.
async fn with_loop(params: &Params, keys: &Arc<Vec<Arc<str>>>, batched: bool) -> Measured {
    let processed = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let queue: WorkQueue<Arc<str>> = WorkQueue::builder().name("bench").build();
    let feeder = {
        let (queue, keys) = (queue.clone(), keys.clone());
        tokio::spawn(async move {
            if batched {
                let mut bursts = futures::stream::iter(keys.iter().cloned()).ready_chunks(64);
                while let Some(burst) = bursts.next().await {
                    if queue.add_all(burst).is_err() {
                        return;
                    }
                }
            } else {
                for k in keys.iter() {
                    if queue.add(k.clone()).is_err() {
                        return;
                    }
                }
            }
        })
    };
    let workers: Vec<_> = (0..params.workers)
        .map(|_| {
            let (queue, processed, n) = (queue.clone(), processed.clone(), params.n);
            tokio::spawn(async move {
                while let Some(item) = queue.get().await {
                    let call = reconcile(item.key().clone(), &processed, n, &queue);
                    match AssertUnwindSafe(call).catch_unwind().await {
                        Ok(Ok(())) => item.forget(),
                        Ok(Err(_)) | Err(_) => {
                            // Refused only once the queue is shut down (an item's key is never
                            // refused as full): the key goes with it.
                            let _ = item.requeue_rate_limited();
                        }
                    }
                }
            })
        })
        .collect();
    super::fifo::join(vec![feeder], "the feeder").await;
    super::fifo::join(workers, "a worker").await;
    Measured {
        seconds: t0.elapsed().as_secs_f64(),
        cpu_s: (cpu_time() - cpu0).as_secs_f64(),
        processed: processed.load(Ordering::Relaxed),
    }
}
