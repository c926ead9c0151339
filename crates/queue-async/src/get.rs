//! The future returned by the work queues' `get`.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::sync::futures::Notified;

use std::sync::Arc;

use crate::core::Backend;
use crate::item::Item;

pin_project! {
    /// Future of [`WorkQueue::get`] and [`PriorityQueue::get`]: the next key as an [`Item`], or
    /// `None` once the queue is shut down and empty.
    ///
    /// Equivalent to `async fn get(&self) -> Option<Item<K, P>>`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a key leaves the queue only in the `poll` that returns it, so dropping the
    /// future never loses one; a wake-up it received but did not use passes to another waiting
    /// `get`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// let get = queue.get(); // waits until something is added
    /// queue.add("a").unwrap();
    /// assert_eq!(*get.await.unwrap(), "a");
    /// # }
    /// ```
    ///
    /// [`WorkQueue::get`]: crate::WorkQueue::get
    /// [`PriorityQueue::get`]: crate::PriorityQueue::get
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Get<'a, K, P = ()> {
        queue: &'a Arc<dyn Backend<K, P>>,
        #[pin]
        notified: Notified<'a>,
    }
}

impl<'a, K, P> Get<'a, K, P> {
    pub(crate) fn new(queue: &'a Arc<dyn Backend<K, P>>) -> Self {
        Get {
            queue,
            notified: queue.get_wake().notified(),
        }
    }
}

impl<K, P> Future for Get<'_, K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Copy + Send + Sync + 'static,
{
    type Output = Option<Item<K, P>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let queue = *this.queue;
        // Fast path: a key is there; no need to register with the `Notify`.
        if let Some(out) = queue.try_get() {
            return Poll::Ready(out.map(|(key, p)| Item::new(queue.clone(), key, p)));
        }
        loop {
            // Register interest before looking again, so an add after the look wakes us.
            this.notified.as_mut().enable();
            if let Some(out) = queue.try_get() {
                return Poll::Ready(out.map(|(key, p)| Item::new(queue.clone(), key, p)));
            }
            ready!(this.notified.as_mut().poll(cx));
            this.notified.set(queue.get_wake().notified());
        }
    }
}

impl<K, P> fmt::Debug for Get<'_, K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Get").finish_non_exhaustive()
    }
}
