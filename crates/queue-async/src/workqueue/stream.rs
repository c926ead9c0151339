//! [`WorkQueue::stream`]: the queue as a `futures::Stream` of items.

use std::hash::Hash;

use futures::Stream;

use super::WorkQueue;
use crate::handle::StreamWait;
use crate::item::Item;
use crate::wait::Wait;

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The items of this queue as a [`Stream`], ending when the queue is shut down and empty.
    ///
    /// The same rules as [`get`](Self::get): each item is a guard (done on drop), no key is
    /// yielded to two consumers at once, and dropping the stream while it waits loses nothing.
    /// A waiting stream is woken by every add (not one per key, as `get`s are), so a stream
    /// that is kept but not polled, say after its `next()` lost a `select!`, holds no wake-up
    /// that another consumer needs.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// for k in ["a", "b", "a"] {
    ///     queue.add(k).unwrap();
    /// }
    /// queue.shut_down();
    /// let keys: Vec<&str> = queue.stream().map(|item| *item.key()).collect().await;
    /// assert_eq!(keys, ["a", "b"]);
    /// # }
    /// ```
    pub fn stream(&self) -> impl Stream<Item = Item<K>> + Send + 'static {
        futures::stream::unfold(self.handle().clone(), |queue| async move {
            let (key, priority) = Wait::new(&StreamWait::new(&queue)).await?;
            Some((Item::new(queue.clone(), key, priority), queue))
        })
    }
}
