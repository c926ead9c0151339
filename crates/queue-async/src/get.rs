//! The future returned by the work queues' `get`.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::item::Item;
use crate::shared::Shared;
use crate::wait::Wait;

pin_project! {
    /// Future of [`WorkQueue::get`] and [`PriorityQueue::get`]: the next key as an [`Item`], or
    /// `None` once the queue is shut down and empty.
    ///
    /// Equivalent to `async fn get(&self) -> Option<Item<K>>`.
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
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// let get = queue.get(); // waits until something is added
    /// queue.add("a").unwrap();
    /// assert_eq!(*get.await.unwrap(), "a");
    /// # }
    /// ```
    ///
    /// [`WorkQueue::get`]: crate::WorkQueue::get
    /// [`PriorityQueue::get`]: crate::PriorityQueue::get
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Get<'a, K>
    where
        K: Hash,
        K: Eq,
        K: Clone,
        K: Send,
        K: Sync,
        K: 'static,
    {
        queue: &'a Arc<Shared<K>>,
        #[pin]
        wait: Wait<'a, Shared<K>>,
    }
}

impl<'a, K: Hash + Eq + Clone + Send + Sync> Get<'a, K> {
    pub(crate) fn new(queue: &'a Arc<Shared<K>>) -> Self {
        Get {
            queue,
            wait: Wait::new(&**queue),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> Future for Get<'_, K> {
    type Output = Option<Item<K>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = ready!(this.wait.poll(cx));
        Poll::Ready(out.map(|(key, p)| Item::new(Arc::clone(this.queue), key, p)))
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> fmt::Debug for Get<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Get").finish_non_exhaustive()
    }
}
