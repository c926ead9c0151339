//! The future returned by [`SchedulingQueue::pop`](super::SchedulingQueue::pop).

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use ctrlq_queue_core::Compare;
use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tracing::trace;

use crate::wait::{WAKES, Wait, WaitOn};

use super::QueuedItem;
use super::machine::Flight;
use super::popped::Popped;
use super::shared::Shared;

pin_project! {
    /// Future of [`SchedulingQueue::pop`]: the most important item, or `None` once closed.
    ///
    /// Equivalent to `async fn pop(&self) -> Option<Popped<K, T>>`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the item leaves the queue only in the `poll` that returns it, so dropping
    /// the future never loses an item.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_queue_async::scheduling::{SchedulingQueue, SchedulingQueueConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = SchedulingQueue::<&str, i64>::new(SchedulingQueueConfig::default()).unwrap();
    /// let pop = queue.pop(); // waits until something is added
    /// queue.add("a", 1).unwrap();
    /// assert_eq!(*pop.await.unwrap().key(), "a");
    /// # }
    /// ```
    ///
    /// [`SchedulingQueue::pop`]: super::SchedulingQueue::pop
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Pop<'a, K, T, C> {
        pub(super) shared: &'a Arc<Shared<K, T, C>>,
        #[pin]
        pub(super) wait: Wait<'a, Shared<K, T, C>>,
    }
}

impl<K, T, C> Future for Pop<'_, K, T, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    T: Send + 'static,
    C: Compare<QueuedItem<K, T>> + Send + Sync + 'static,
{
    type Output = Option<Popped<K, T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let wait = this.wait.poll(cx);
        if wait.is_pending() {
            // A change's drop makes sure the timer's task runs if a deadline needs it (items
            // may have gone to backoff from a plain thread before any runtime was bound).
            drop(this.shared.change());
        }
        let out = ready!(wait);
        Poll::Ready(out.map(|flight| Popped::new(this.shared.clone(), flight)))
    }
}

/// `pop`: every waiting `pop` looks once a change lets a pop take an item.
impl<K, T, C> WaitOn for Shared<K, T, C>
where
    K: Hash + Eq + Clone,
    C: Compare<QueuedItem<K, T>>,
{
    type Output = Option<Flight<K, T>>;

    fn notify(&self) -> &Notify {
        &self.pop_wake
    }

    /// One pop attempt: `None` if nothing to pop, `Some(None)` once closed.
    fn try_take(&self) -> Option<Option<Flight<K, T>>> {
        let mut locked = self.lock();
        if locked.machine.closed {
            return Some(None);
        }
        let flight = locked.machine.pop(|| self.clock.now())?;
        trace!(name: "hand_out", target: WAKES, "an item popped");
        Some(Some(flight))
    }
}

impl<K, T, C> fmt::Debug for Pop<'_, K, T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pop").finish_non_exhaustive()
    }
}
