//! The work queue: client-go's common, delaying and rate-limiting queues in one handle
//! ([`WorkQueue`]), with the cancel-safe [`Get`](crate::futures::Get) future and the
//! [`Item`](crate::Item) guard.

mod builder;
mod queue;
mod stream;

pub use builder::WorkQueueBuilder;
/// The longest delay honoured by delayed adds (longer delays are clamped to it): the
/// workspace's one far-future limit, [`ctrlq_ratelimit::MAX_DELAY`].
pub use ctrlq_ratelimit::MAX_DELAY;
pub use queue::WorkQueue;
