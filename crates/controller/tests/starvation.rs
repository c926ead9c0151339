//! A reconcile that never awaits, requeued with zero delay, on a current-thread runtime shared
//! with the elector: the worker gives the thread back (every queue future spends tokio's
//! cooperative budget), so the elector keeps renewing while it spins, and on a lost lease the
//! worker stops within the elector's bound (retry period + renew deadline after its last
//! successful renew).
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
    assert!(seen.reconciles > 1_000, "{seen:?}");
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
