//! The work queue: client-go's common, delaying and rate-limiting queues in one handle
//! ([`WorkQueue`]), with the cancel-safe [`Get`] future and the [`Item`] guard.

mod builder;
mod queue;
mod stream;

pub use crate::get::Get;
pub use crate::item::Item;
pub use crate::runtime::MAX_DELAY;
pub use builder::WorkQueueBuilder;
pub use queue::WorkQueue;
