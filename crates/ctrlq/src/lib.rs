#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Pure data structures with no async and no clock reads: the keyed heap and the work and
/// priority queues' state machines (the `ctrlq-queue-core` crate).
pub use ctrlq_queue_core as queue_core;

/// The queues workers await on: [`WorkQueue`](queue::WorkQueue),
/// [`PriorityQueue`](queue::PriorityQueue), [`SchedulingQueue`](queue::SchedulingQueue),
/// [`parallelize_until`](queue::parallelize_until) and metrics (the `ctrlq-queue-async` crate).
pub use ctrlq_queue_async as queue;

/// The retry limiters (the `ctrlq-ratelimit` crate).
pub use ctrlq_ratelimit as ratelimit;

/// Lease-based leader election over a pluggable lock (the `ctrlq-leader` crate).
pub use ctrlq_leader as leader;

/// The controller runner (the `ctrlq-controller` crate).
pub use ctrlq_controller as controller;
