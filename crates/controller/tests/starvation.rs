//! A reconcile that never awaits, requeued with zero delay, on a current-thread runtime shared
//! with the elector: the worker gives the thread back after each such reconcile, so the elector
//! keeps renewing while it spins, and on a lost lease the worker stops within the elector's
//! bound (retry period + renew deadline after its last successful renew).
//!
//! The scenario runs on its own thread; the test waits for it with a real-time bound, so a
//! worker that never yields fails the test instead of hanging it.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::{Action, Context, Controller};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const S: fn(u64) -> Duration = Duration::from_secs;

/// What the scenario saw, on the virtual clock.
#[derive(Debug)]
struct Seen {
    reconciles: u64,
    partitioned_at: Instant,
    /// When the replica sent its last successful renew.
    last_renew: Instant,
    last_reconcile: Instant,
    reconciles_after_the_loss: u64,
    other_led_at: Instant,
}

fn config() -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(S(15))
        .renew_deadline(S(10))
        .retry_period(S(2))
        .jitter_seed(3)
}

async fn scenario() -> Seen {
    let store = MemoryStore::new();
    let a = Arc::new(LeaderElector::new(store.lock("a"), config()).unwrap());
    let reconciles = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(Instant::now()));
    let (count, at) = (reconciles.clone(), last.clone());
    let controller = Controller::new("spin", move |_key: u32, _ctx: Context| {
        count.fetch_add(1, Ordering::Relaxed);
        *at.lock().unwrap() = Instant::now();
        // Pure CPU: ready at once, and requeued at once.
        std::future::ready(Ok::<_, Infallible>(Action::requeue_after(Duration::ZERO)))
    })
    .source(|| futures::stream::iter([1u32]))
    .workers(1)
    .leader_elector(a.clone());
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(controller.run(shutdown.clone()));

    // Busy for 30 s: the clock moves only when the test moves it, as the runtime never idles.
    let step = Duration::from_millis(100);
    let start = Instant::now();
    while Instant::now() < start + S(30) {
        tokio::time::advance(step).await;
    }
    let partitioned_at = Instant::now();
    store.partition("a", true);
    // A second replica stands now; it can lead only once a's lease has expired.
    let b = LeaderElector::new(store.lock("b"), config()).unwrap();
    let b_leads = tokio::spawn(async move {
        b.run(CancellationToken::new(), |_| async { Instant::now() })
            .await
    });
    while !b_leads.is_finished() && Instant::now() < partitioned_at + S(60) {
        tokio::time::advance(step).await;
    }
    let other_led_at = b_leads
        .await
        .unwrap()
        .expect("b leads once a's lease expired");
    let at_b = reconciles.load(Ordering::Relaxed);
    // Go on a while: a reconciles nothing more.
    for _ in 0..50 {
        tokio::time::advance(step).await;
    }
    shutdown.cancel();
    let _ = run.await;
    let total = reconciles.load(Ordering::Relaxed);
    Seen {
        reconciles: total,
        partitioned_at,
        last_renew: a.observed_at(),
        last_reconcile: *last.lock().unwrap(),
        reconciles_after_the_loss: total - at_b,
        other_led_at,
    }
}

#[test]
fn a_spinning_reconcile_lets_the_elector_renew_and_stops_on_a_loss() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(scenario()));
    });
    let seen = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the runtime's other tasks ran: the worker gave the thread back");
    // It kept reconciling all along (one reconcile per turn of the runtime).
    assert!(seen.reconciles > 300, "{seen:?}");
    // It kept renewing while busy: the last renew is within a retry period (and its jitter) of
    // the partition.
    assert!(
        seen.partitioned_at - seen.last_renew <= Duration::from_millis(4_400),
        "{seen:?}"
    );
    // The bound: no reconcile later than retry period + renew deadline after the last renew,
    // and none once the other replica leads.
    assert!(seen.last_reconcile <= seen.last_renew + S(12), "{seen:?}");
    assert!(seen.other_led_at >= seen.last_renew + S(15), "{seen:?}");
    assert_eq!(seen.reconciles_after_the_loss, 0, "{seen:?}");
}

/// Reconciles that never await, on a current-thread runtime: between two of them the worker
/// gives the thread back, so another task (the elector's renew, a drain's grace timer) runs
/// after at most one reconcile of each worker, not after a cooperative budget's worth (128
/// keys, each of which may compute for long).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn another_task_runs_between_two_reconciles_that_never_await() {
    const WORKERS: u64 = 2;
    // Reconciles since the probe task last ran, and the most seen at once.
    let since_probe = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let (since, max, count) = (since_probe.clone(), most.clone(), total.clone());
    let controller = Controller::new("cpu", move |_key: u32, _ctx: Context| {
        let n = since.fetch_add(1, Ordering::Relaxed) + 1;
        max.fetch_max(n, Ordering::Relaxed);
        count.fetch_add(1, Ordering::Relaxed);
        // Computes and returns, never awaiting; requeued at once.
        std::future::ready(Ok::<_, Infallible>(Action::requeue_after(Duration::ZERO)))
    })
    .source(|| futures::stream::iter(1..=8u32))
    .workers(WORKERS as usize);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(controller.run(shutdown.clone()));
    let probe = {
        let (since, most) = (since_probe.clone(), most.clone());
        async move {
            // Counted from the probe's first turn on: before it, the run was starting up.
            since.store(0, Ordering::Relaxed);
            most.store(0, Ordering::Relaxed);
            for _ in 0..2_000 {
                tokio::task::yield_now().await;
                since.store(0, Ordering::Relaxed);
            }
        }
    };
    // A task like the elector's (the test's own future is polled on another schedule).
    tokio::spawn(probe).await.unwrap();
    shutdown.cancel();
    let _ = tokio::time::timeout(S(5), run)
        .await
        .expect("the run drains");
    assert!(total.load(Ordering::Relaxed) > 1_000, "{total:?}");
    // Each worker yields after every such reconcile; the probe's own yields put it on tokio's
    // deferred list, resumed after each worker had its turn once or twice. A worker that kept
    // the thread until its cooperative budget ran out would run 128 in a row.
    let most = most.load(Ordering::Relaxed);
    assert!(
        most <= 2 * WORKERS,
        "{most} reconciles ran while the probe waited"
    );
}
