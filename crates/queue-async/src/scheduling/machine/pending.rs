//! Reports on a queue's content: [`SubQueue`] and [`Pending`].

use std::fmt;

/// Where a queued key is.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig, SubQueue};
///
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("a", 1).unwrap();
/// assert_eq!(queue.where_is(&"a"), Some(SubQueue::Active));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubQueue {
    /// Ready to pop.
    Active,
    /// Waiting out a backoff.
    Backoff,
    /// Waiting for an event (rejected or gated).
    Unschedulable,
}

/// The keys of every queued item, by sub-queue (each in arbitrary order); `Display` gives the
/// original's summary line.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
///
/// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
/// queue.add("a", 1).unwrap();
/// assert_eq!(queue.pending().to_string(), "activeQ:1; backoffQ:0; unschedulablePods:0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending<K> {
    /// Keys in the active sub-queue.
    pub active: Vec<K>,
    /// Keys in the backoff sub-queue.
    pub backoff: Vec<K>,
    /// Keys in the unschedulable sub-queue.
    pub unschedulable: Vec<K>,
}

// ===== impl Pending =====

impl<K> fmt::Display for Pending<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "activeQ:{}; backoffQ:{}; unschedulablePods:{}",
            self.active.len(),
            self.backoff.len(),
            self.unschedulable.len()
        )
    }
}
