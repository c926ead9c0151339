//! The work queue: client-go's common, delaying and rate-limiting queues in one handle
//! ([`WorkQueue`]), the cancel-safe [`Get`] future and the [`Item`] guard.

mod delay;
mod get;
mod item;
mod queue;
mod stream;

pub use get::Get;
pub use item::Item;
pub use queue::{Builder, MAX_DELAY, WorkQueue};
