//! `wqbench WORKLOAD [--n N] [--workers W] [--producers P] [--keys K] [--seed S] [--spread-ms MS]
//! [--threads T]`: runs one workload of `WORKLOADS.md` and prints its JSON line.

use benches::common::{Extra, Overrides, set_threads, steal_time, threads};
use benches::workloads;
use std::alloc::System;
use std::process::ExitCode;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// Counts live heap bytes for the `memory` workload (a relaxed atomic add per allocation; the
/// other workloads allocate little inside their timed regions).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok((id, params)) => match (steal_time(), workloads::run(&id, &params), steal_time()) {
            (before, Some(mut report), after) => {
                // Machine-wide, over the whole run (set-up included): a run with steal is noisy.
                if let (Some(before), Some(after)) = (before, after) {
                    let stolen = after.saturating_sub(before).as_secs_f64();
                    report.extra.push(("steal_s", Extra::Num(stolen)));
                }
                report.extra.push(("threads", Extra::Num(threads() as f64)));
                println!("{}", report.to_json());
                ExitCode::SUCCESS
            }
            (_, None, _) => {
                eprintln!(
                    "unknown workload {id:?}; known: {}",
                    workloads::IDS.join(", ")
                );
                ExitCode::from(2)
            }
        },
        Err(msg) => {
            eprintln!("{msg}");
            eprintln!(
                "usage: wqbench WORKLOAD [--n N] [--workers W] [--producers P] [--keys K] [--seed S] [--spread-ms MS] [--threads T]"
            );
            ExitCode::from(2)
        }
    }
}

/// Parses the command line; flags left out keep the workload's defaults.
fn parse(args: &[String]) -> Result<(String, Overrides), String> {
    let mut it = args.iter();
    let id = it.next().ok_or("missing WORKLOAD")?.clone();
    let mut p = Overrides::default();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let value: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a whole number"))?;
        match flag.as_str() {
            "--n" => p.n = Some(value),
            "--workers" => p.workers = Some(value),
            "--producers" => p.producers = Some(value),
            "--keys" => p.keys = Some(value),
            "--seed" => p.seed = Some(value),
            "--spread-ms" => p.spread_ms = Some(value),
            // The runtime's worker threads; not a workload parameter, so it is set here.
            "--threads" => set_threads(usize::try_from(value).map_err(|_| "--threads: too large")?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok((id, p))
}
