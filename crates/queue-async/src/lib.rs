//! Tokio-native work queues that controller workers await on.
//!
//! This crate is a skeleton: the work queue, the delaying and rate-limiting queues and the
//! scheduling queue are being built on top of [`queue_core`]. Nothing is exported yet.
//!
//! [`SchedulingQueue`] is kube-scheduler's scheduling queue for any keyed item: pop the most
//! important item, and on failure let the queue decide between a backoff, waiting for an event
//! that could help (queueing hints, pre-enqueue gates), or going straight back.

mod core;
mod error;
mod get;
mod item;
pub mod metrics;
pub mod parallelize;
pub mod priority;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
pub mod scheduling;
pub mod workqueue;

pub use error::ShutDown;
pub use get::Get;
pub use item::Item;
pub use parallelize::{ParallelizeError, parallelize_until};
pub use priority::PriorityQueue;
pub use scheduling::SchedulingQueue;
pub use workqueue::WorkQueue;
