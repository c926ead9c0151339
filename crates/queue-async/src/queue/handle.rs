//! [`Queue`]: the handle type and every method that is not an add or a constructor.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use crate::get::Get;
use crate::shared::{Payload, Shared};

/// The handle behind [`WorkQueue`] (`P = ()`) and [`PriorityQueue`] (`P = i32`): every method
/// the two share is written once, here. `P` is what an add carries besides the key, and it
/// picks the state machine (FIFO, or by priority); the crate's sealed payload trait admits only
/// those two, so use the queues by their names.
///
/// A handle is a cheap [`Clone`]: every clone works on the same queue.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::{PriorityQueue, Queue, WorkQueue};
///
/// let work: WorkQueue<&str> = Queue::new();
/// let prio: PriorityQueue<&str> = Queue::new();
/// work.add("a").unwrap();
/// prio.add("a").unwrap();
/// assert_eq!((work.len(), prio.len()), (1, 1));
/// ```
///
/// [`WorkQueue`]: crate::WorkQueue
/// [`PriorityQueue`]: crate::PriorityQueue
pub struct Queue<K, P = ()>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    pub(crate) inner: Arc<Shared<K, P>>,
}

impl<K, P> Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    /// Waits for the next key: `Some(item)`, or `None` once the queue is shut down and empty.
    /// A priority queue hands out its best ready key, with
    /// [`Item::priority`](crate::Item::priority).
    ///
    /// See [`Get`] for cancel safety.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn get(&self) -> Get<'_, K, P> {
        Get::new(&self.inner)
    }

    /// Clears the rate limiter's history of `key` (call it when the key succeeded).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap();
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn forget(&self, key: &K) {
        self.inner.forget(key);
    }

    /// How many times the rate limiter has delayed `key` since it was last forgotten.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap();
    /// queue.add_rate_limited("a").unwrap();
    /// assert_eq!(queue.num_requeues(&"a"), 2);
    /// # }
    /// ```
    pub fn num_requeues(&self, key: &K) -> usize {
        self.inner.num_requeues(key)
    }

    /// Marks `key` done: for keys taken out of an item with
    /// [`Item::into_key`](crate::Item::into_key). If the key was added while it was
    /// processed, it is queued again now. Ignored for a key that is not being processed, was
    /// done already, or is held by an [`Item`](crate::Item): an item's hand-out is ended by the
    /// item alone, so a stray `done` never ends it or a later hand-out of the key to another
    /// worker.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let key = queue.get().await.unwrap().into_key();
    /// queue.add("a").unwrap(); // while processing: queued again at done
    /// assert_eq!(queue.len(), 0);
    /// queue.done(&key);
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn done(&self, key: &K) {
        self.inner.done(key);
    }

    /// Keys ready to be handed out: not those being processed or waiting for a delay.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.add("a").unwrap();
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether no key is ready.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::<u32>::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for their delay.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_after("a", std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!((queue.len(), queue.waiting_len()), (0, 1));
    /// # }
    /// ```
    pub fn waiting_len(&self) -> usize {
        self.inner.waiting_len()
    }

    /// Keys handed out and not yet done.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(queue.processing_len(), 1);
    /// item.done();
    /// assert_eq!(queue.processing_len(), 0);
    /// # }
    /// ```
    pub fn processing_len(&self) -> usize {
        self.inner.processing_len()
    }

    /// Stops the queue: adds are refused, keys waiting for a delay are dropped, `get` returns
    /// what is ready and then `None`. Cuts a running
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) short. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add(1).unwrap();
    /// queue.shut_down();
    /// assert!(queue.get().await.is_some()); // ready before the shutdown
    /// assert!(queue.get().await.is_none());
    /// # }
    /// ```
    pub fn shut_down(&self) {
        self.inner.shut_down(false);
    }

    /// Shuts down like [`shut_down`](Self::shut_down), then waits until every ready key has
    /// been handed out and every handed-out key is done (client-go waits for in-flight keys
    /// only). A concurrent `shut_down` ends the wait early.
    ///
    /// Equivalent to `async fn shut_down_with_drain(&self)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; the queue stays shut down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let worker = queue.clone();
    /// tokio::spawn(async move { while let Some(item) = worker.get().await { item.done() } });
    /// queue.shut_down_with_drain().await;
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    pub async fn shut_down_with_drain(&self) {
        self.inner.shut_down(true);
        self.inner.wait_drained().await;
    }

    /// Whether [`shut_down`](Self::shut_down) or
    /// [`shut_down_with_drain`](Self::shut_down_with_drain) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::WorkQueue::<u32>::new();
    /// queue.shut_down();
    /// assert!(queue.is_shutting_down());
    /// ```
    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shutting_down()
    }

    /// Adds every key whose delay is over at this instant, so that a test that advanced the
    /// paused clock sees them queued without letting the delay task run first (client-go's
    /// "wait for the waiting loop" helper).
    ///
    /// It completes at its first poll: the keys are added by the caller, not by the delay task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_millis(50)).unwrap();
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// queue.settle().await;
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub async fn settle(&self) {
        self.inner.settle();
    }
}

impl<K, P> Clone for Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K, P> fmt::Debug for Queue<K, P>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    P: Payload,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.describe(f, P::QUEUE_NAME)
    }
}
