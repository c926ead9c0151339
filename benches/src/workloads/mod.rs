//! One module per workload of `WORKLOADS.md`; [`run`] dispatches by id.

use crate::common::{Overrides, Report};

mod bare;
pub mod concurrent;
pub mod controller;
pub mod delay;
pub mod fifo;
pub mod hotkeys;
mod leader_failover;
pub mod memory;
pub mod priority;
pub mod ratelimited;
pub mod sched_backoff;
pub mod sched_move;
pub mod sched_pop;
mod sharding;
mod warm_failover;

/// The workload ids this binary knows, in `WORKLOADS.md` order.
pub const IDS: &[&str] = &[
    "fifo",
    "concurrent",
    "hotkeys",
    "delay",
    "memory",
    "memory-keys",
    "priority",
    "ratelimited-exp",
    "ratelimited-default",
    "sched-pop",
    "sched-move",
    "sched-backoff",
    "leader-failover",
    "controller",
    "shard-settle",
    "shard-spread",
    "warm-failover",
];

/// Runs workload `id` with the given flags over its defaults, or returns `None` for an unknown id.
///
/// Each workload module has `pub fn run(flags: &Overrides) -> Report`.
pub fn run(id: &str, flags: &Overrides) -> Option<Report> {
    match id {
        "fifo" => Some(fifo::run(flags)),
        "concurrent" => Some(concurrent::run(flags)),
        "hotkeys" => Some(hotkeys::run(flags)),
        "delay" => Some(delay::run(flags)),
        "memory" => Some(memory::run(flags)),
        "memory-keys" => Some(memory::run_keys_alone(flags)),
        "priority" => Some(priority::run(flags)),
        "ratelimited-exp" => Some(ratelimited::run_exp(flags)),
        "ratelimited-default" => Some(ratelimited::run_default(flags)),
        "sched-pop" => Some(sched_pop::run(flags)),
        "sched-move" => Some(sched_move::run(flags)),
        "sched-backoff" => Some(sched_backoff::run(flags)),
        "leader-failover" => Some(leader_failover::run(flags)),
        "controller" => Some(controller::run(flags)),
        "shard-settle" => Some(sharding::run_settle(flags)),
        "shard-spread" => Some(sharding::run_spread(flags)),
        "warm-failover" => Some(warm_failover::run(flags)),
        _ => None,
    }
}
