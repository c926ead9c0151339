//! Benchmark workloads shared by the criterion benches and the `wqbench` binary.
//!
//! The workloads and the JSON line each prints are defined in the project's `WORKLOADS.md`
//! contract: `{"workload", "params", "seconds", "ops_per_sec", "extra"}`.

pub mod common;
pub mod replicas;
pub mod workloads;
