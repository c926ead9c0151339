//! Benchmark workloads shared by the criterion benches and the `wqbench` binary.
