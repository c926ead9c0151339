//! The priority work queue: controller-runtime's priority queue (higher priority first, FIFO
//! within a priority) with the work queue's guarantees ([`PriorityQueue`]).

mod builder;
mod queue;

pub use builder::PriorityQueueBuilder;
pub use queue::{AddOptions, PriorityQueue};
