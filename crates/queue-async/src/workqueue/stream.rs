//! [`WorkQueue::stream`]: the queue as a `futures::Stream` of items.

use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::Stream;
use tokio::sync::Notify;

use super::WorkQueue;
use crate::item::Item;
use crate::shared::{QueueKey, Shared};
use crate::wait::{Wait, WaitOn};

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
        futures::stream::unfold(self.shared().clone(), |queue| async move {
            let (key, priority) = Wait::new(&StreamWait::new(&queue)).await?;
            Some((Item::new(queue.clone(), key, priority), queue))
        })
    }
}

/// A stream's wait: registered while it waits, so that every add wakes it (a stream that is
/// kept but not polled must not hold a wake-up another consumer needs, as a `get` would).
pub(crate) struct StreamWait<'a, K: QueueKey> {
    handle: &'a Shared<K>,
    registered: AtomicBool,
}

impl<'a, K: QueueKey> StreamWait<'a, K> {
    pub(crate) fn new(handle: &'a Shared<K>) -> Self {
        StreamWait {
            handle,
            registered: AtomicBool::new(false),
        }
    }

    fn register(&self, waiting: bool) {
        if waiting != self.registered.swap(waiting, Ordering::Relaxed) {
            if waiting {
                self.handle.streams_waiting.fetch_add(1, Ordering::SeqCst);
            } else {
                self.handle.streams_waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl<K: QueueKey + 'static> WaitOn for StreamWait<'_, K> {
    type Output = Option<(K, i32)>;

    fn notify(&self) -> &Notify {
        &self.handle.stream_wake
    }

    fn try_take(&self) -> Option<Option<(K, i32)>> {
        // Registered before the look: an add that queues a key after the look reads the
        // queue's count of waiting streams after that key's push (both ordered by the lock the
        // look and the push take), so it sees this stream and wakes it.
        self.register(true);
        let out = WaitOn::try_take(self.handle);
        self.register(out.is_none());
        out
    }
}

impl<K: QueueKey> Drop for StreamWait<'_, K> {
    fn drop(&mut self) {
        if *self.registered.get_mut() {
            self.handle.streams_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
