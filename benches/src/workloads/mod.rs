//! One module per workload of `WORKLOADS.md`; [`run`] dispatches by id.

use crate::common::{Overrides, Report};

mod leader_failover;

/// The workload ids this binary knows, in `WORKLOADS.md` order.
pub const IDS: &[&str] = &["leader-failover"];

/// Runs workload `id` with the given flags over its defaults, or returns `None` for an unknown id.
///
/// Each workload module has `pub fn run(flags: &Overrides) -> Report`.
// One arm per workload module: `"fifo" => Some(fifo::run(flags)),`.
#[allow(clippy::match_single_binding)]
pub fn run(id: &str, flags: &Overrides) -> Option<Report> {
    let _ = flags;
    match id {
        "leader-failover" => Some(leader_failover::run(flags)),
        _ => None,
    }
}
