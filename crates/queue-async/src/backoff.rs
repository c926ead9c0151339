//! [`InBackoff`]: what an add does to a key that waits out a failure's backoff.

/// What a plain add ([`WorkQueue::add`](crate::WorkQueue::add), or a
/// [`PriorityQueue`](crate::PriorityQueue)'s add at any priority) does to a key in failure
/// backoff: one waiting for a rate-limited add, or one being processed again after such a wait
/// (its rate limiter still counts its failures: [`num_requeues`](crate::WorkQueue::num_requeues)
/// above 0).
///
/// Either way the key is never lost and its failure count is reset only by
/// [`forget`](crate::WorkQueue::forget) (a controller forgets a key's failures at a success):
/// an add never resets it.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::{InBackoff, WorkQueue};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let queue = WorkQueue::builder().in_backoff(InBackoff::WaitOut).build();
/// queue.add_rate_limited("a").unwrap(); // a failure: "a" waits 5 ms
/// queue.add("a").unwrap(); // a change meanwhile: "a" still waits out its backoff
/// assert_eq!(queue.len(), 0);
/// assert_eq!(queue.waiting_len(), 1);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum InBackoff {
    /// The add ends the wait and the key is handed out at once (after its current processing,
    /// if it is processed): client-go's and controller-runtime's behaviour, and the default.
    /// A change is new information: a fix (a Secret created, a quota raised) is acted on at
    /// once. The cost: every failed attempt charges the limiter, so a key whose changes keep
    /// coming while it keeps failing reaches the limiter's longest delay after a few seconds of
    /// event traffic (kubernetes/kubernetes#112325).
    #[default]
    RunNow,
    /// The key keeps waiting for the end of its backoff, and is handed out then, once, at the
    /// higher of the two priorities; an add while it is processed after a failure is held until
    /// that processing ends: dropped if it fails again (the rate-limited add that follows brings
    /// the key back after its backoff, when it reads the latest state), the key queued at once
    /// if it succeeds. So the failure count grows only with the limiter's own retries, however
    /// many changes arrive, and a change waits at most the current backoff.
    WaitOut,
}
