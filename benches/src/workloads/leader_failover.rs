//! `leader-failover`: 3 candidates on the in-memory lock, paused time, 15 s / 10 s / 2 s; kill the
//! leader `n` times (default 1,000) at random moments (seeded) and measure, in virtual seconds,
//! from the killed leader's last successful renew to the next leader. Also runs `keys` (default
//! 10,000) seeded simulations with random faults (kills, partitions, slow store, failures, lost
//! races) and counts moments with two leaders in all of them (must be 0). The simulation is the
//! leader crate's test support (`crates/leader/tests/support/simulation.rs`).

use std::time::Instant;

use ctrlq_leader::LeaderElectionConfig;
use simulation::simulate;

#[path = "../../../crates/leader/tests/support/simulation.rs"]
mod simulation;

use crate::common::{Extra, Overrides, Params, Report, cpu_time, percentile};

/// Runs the workload.
pub(crate) fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 1_000,
        keys: 10_000,
        ..Params::defaults()
    });
    let rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("the paused runtime must start")
    };
    let config = LeaderElectionConfig::default();
    let (cpu0, t0) = (cpu_time(), Instant::now());
    let kills = usize::try_from(params.n).unwrap_or(usize::MAX);
    let report = rt().block_on(simulate(config.clone(), params.seed, 3, kills, false));
    let mut overlaps = report.overlaps;
    for run in 0..params.keys {
        let seed = params.seed.wrapping_add(run.wrapping_mul(0x9e37_79b9));
        overlaps += rt()
            .block_on(simulate(config.clone(), seed, 3, 3, true))
            .overlaps;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = (cpu_time() - cpu0).as_secs_f64();
    let mut f: Vec<f64> = report.failovers.iter().map(|d| d.as_secs_f64()).collect();
    f.sort_by(f64::total_cmp);
    let bound = 15.0 + 4.4 * 2.0;
    let max = f.last().copied().unwrap_or(f64::NAN);

    Report {
        workload: "leader-failover",
        params,
        seconds,
        ops_per_sec: f.len() as f64 / seconds,
        extra: vec![
            (
                "failover_s",
                Extra::Obj(vec![
                    ("p50", percentile(&f, 50.0)),
                    ("p99", percentile(&f, 99.0)),
                    ("max", max),
                    ("bound", bound),
                ]),
            ),
            ("overlaps", Extra::Num(overlaps as f64)),
            ("fault_runs", Extra::Num(params.keys as f64)),
            (
                "ok",
                Extra::Bool(overlaps == 0 && max <= bound && f.len() == kills),
            ),
            ("cpu_s", Extra::Num(cpu_s)),
        ],
    }
}
