//! Seeded simulations: 3 candidates, random kills and faults, never two leaders at once.

#[path = "support/simulation.rs"]
mod simulation;

use std::time::Duration;

use ctrlq_leader::LeaderElectionConfig;
use simulation::simulate;

#[path = "support/bounded.rs"]
mod bounded;
use bounded::bounded;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn three_candidates_with_random_faults_should_never_overlap() {
    let config = LeaderElectionConfig::default();
    let runs: u64 = std::env::var("LEADER_SIM_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for seed in 0..runs {
        let report = runtime().block_on(bounded(simulate(config.clone(), seed, 3, 3, true)));
        assert_eq!(report.overlaps, 0, "seed {seed}: {report:?}");
        assert!(report.terms >= 3, "seed {seed}: {report:?}");
    }
}

#[test]
fn crash_failover_should_stay_within_lease_duration_plus_four_point_four_retry_periods() {
    // LD + 2 × 2.2 × RP: the follower sees the last renew up to 2.2 RP late, then tries up to
    // 2.2 RP after the lease expires on its clock.
    let bound = Duration::from_secs(15) + Duration::from_secs(2).mul_f64(4.4);
    for seed in 0..100 {
        let report = runtime().block_on(bounded(simulate(
            LeaderElectionConfig::default(),
            seed,
            3,
            5,
            false,
        )));
        assert_eq!(report.overlaps, 0, "seed {seed}");
        for f in &report.failovers {
            assert!(*f <= bound, "seed {seed}: failover {f:?} > {bound:?}");
            assert!(
                *f >= Duration::from_secs(15),
                "seed {seed}: failover {f:?} before the lease expired"
            );
        }
    }
}
