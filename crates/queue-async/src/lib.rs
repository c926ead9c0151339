//! Tokio-native work queues that controller workers await on, built on [`queue_core`]'s state
//! machines.
//!
//! [`WorkQueue`] is client-go's work queue with its delaying and rate-limiting layers in one
//! handle: `add` / `add_after` / `add_rate_limited`, a cancel-safe [`get`](WorkQueue::get)
//! future that hands out an [`Item`] guard (done on drop), de-duplication, and no key in two
//! workers at once. [`PriorityQueue`] is the same with priorities (controller-runtime's priority
//! queue), and [`parallelize_until`] runs pieces of work on a bounded number of tasks.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let queue = queue_async::WorkQueue::new();
//! queue.add("default/pod-a").unwrap();
//! let item = queue.get().await.unwrap();
//! assert_eq!(*item.key(), "default/pod-a");
//! item.done();
//! # }
//! ```
//!
//! [`SchedulingQueue`] is kube-scheduler's scheduling queue for any keyed item: pop the most
//! important item, and on failure let the queue decide between a backoff, waiting for an event
//! that could help (queueing hints, pre-enqueue gates), or going straight back.
//!
//! # Time
//!
//! Every queue reads tokio's clock (`tokio::time::Instant`), so `tokio::time::pause()` drives
//! delays, backoffs, priority aging and the metrics' durations alike. A call from a plain thread
//! outside any runtime is timed by the queue's runtime (the one it was built in, or the one
//! its background task runs in), not by the real clock, so a test may hand work to helper
//! threads and still see paused time.

mod clock;
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
mod shared;
mod task;
mod wait;
pub mod workqueue;

pub use error::ShutDownError;
pub use get::Get;
pub use item::Item;
pub use parallelize::{ParallelizeError, parallelize_until};
pub use priority::{PriorityQueue, PriorityQueueBuilder};
pub use scheduling::SchedulingQueue;
pub use workqueue::{WorkQueue, WorkQueueBuilder};
