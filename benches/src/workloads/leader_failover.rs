//! `leader-failover`: 3 candidates on the in-memory lock, paused time, 15 s / 10 s / 2 s; kill the
//! leader `n` times (default 1,000) at random moments (seeded) and measure, in virtual seconds,
//! from the killed leader's last successful renew to the next leader. Also runs `keys` (default
//! 10,000) seeded simulations with random faults (kills, partitions, slow store, failures, lost
//! races) and counts moments with two leaders in all of them (must be 0).
//!
//! The same again over `LeaseLock`s talking HTTP to the in-process emulation of the Kubernetes
//! API server's Lease endpoints (`ctrlq_leader::lease_emulation`), with a tenth of the kills and a
//! hundredth of the fault runs (each request is a real HTTP exchange on 127.0.0.1): the
//! `lease_*` figures.

use std::sync::Arc;
use std::time::Instant;

use ctrlq_leader::LeaderElectionConfig;
use ctrlq_leader::lease_emulation::LeaseServer;
use ctrlq_leader::simulation::{LeaseBackend, simulate, simulate_with};

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

    // Over the Lease lock: HTTP needs the I/O driver too.
    let io_rt = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("the paused runtime must start")
    };
    let lease_run = |seed: u64, kills: usize, faults: bool| {
        io_rt().block_on(async {
            simulate_with(
                LeaseBackend(Arc::new(LeaseServer::start())),
                config.clone(),
                seed,
                3,
                kills,
                faults,
            )
            .await
        })
    };
    let (lease_cpu0, lease_t0) = (cpu_time(), Instant::now());
    let lease_kills = kills.div_ceil(10);
    let lease_report = lease_run(params.seed, lease_kills, false);
    let mut lease_overlaps = lease_report.overlaps;
    let lease_fault_runs = params.keys.div_ceil(100);
    for run in 0..lease_fault_runs {
        let seed = params.seed.wrapping_add(run.wrapping_mul(0x9e37_79b9));
        lease_overlaps += lease_run(seed, 3, true).overlaps;
    }
    let lease_seconds = lease_t0.elapsed().as_secs_f64();
    let mut lf: Vec<f64> = lease_report
        .failovers
        .iter()
        .map(|d| d.as_secs_f64())
        .collect();
    lf.sort_by(f64::total_cmp);
    let lease_max = lf.last().copied().unwrap_or(f64::NAN);
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
                "lease_failover_s",
                Extra::Obj(vec![
                    ("p50", percentile(&lf, 50.0)),
                    ("p99", percentile(&lf, 99.0)),
                    ("max", lease_max),
                    ("bound", bound),
                ]),
            ),
            ("lease_overlaps", Extra::Num(lease_overlaps as f64)),
            ("lease_kills", Extra::Num(lease_kills as f64)),
            ("lease_fault_runs", Extra::Num(lease_fault_runs as f64)),
            ("lease_seconds", Extra::Num(lease_seconds)),
            (
                "lease_cpu_s",
                Extra::Num((cpu_time() - lease_cpu0).as_secs_f64()),
            ),
            (
                "ok",
                Extra::Bool(
                    overlaps == 0
                        && max <= bound
                        && f.len() == kills
                        && lease_overlaps == 0
                        && lease_max <= bound
                        && lf.len() == lease_kills,
                ),
            ),
            ("cpu_s", Extra::Num(cpu_s)),
        ],
    }
}
