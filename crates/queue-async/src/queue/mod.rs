//! The one handle behind the work queue and the priority queue: [`Queue`] and its builder,
//! [`QueueBuilder`]. `WorkQueue` and `PriorityQueue` are these with the payload fixed.

mod add;
mod builder;
mod handle;

pub use builder::QueueBuilder;
pub use handle::Queue;
