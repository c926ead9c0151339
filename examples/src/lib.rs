//! The code behind the workspace's examples, as a library so tests can run it in virtual time.
//!
//! - [`controller`]: replicas of a controller built on the `ctrlq` controller runner share a lease; the
//!   leader is killed midway and another finishes the work; the last one drains.
//! - [`scheduler`]: a scheduling queue placing pods that wait in backoff or unschedulable.
//! - [`sharded`]: the `--shards N` mode: replicas split the keys into shards held through
//!   leases, and the shards follow a kill and a join.
//! - `pod_scheduler` (feature `kube`): a Kubernetes scheduler on the scheduling queue, binding
//!   real Pods through the API server, leader-elected on a Lease.
//! - [`cli`]: the main example's flags.
//! - [`metrics`]: the Prometheus registry the example prints with `--metrics`.

pub mod cli;
pub mod controller;
pub mod metrics;
#[cfg(feature = "kube")]
pub mod operator;
#[cfg(feature = "kube")]
pub mod pod_scheduler;
pub mod rng;
pub mod scheduler;
pub mod sharded;
