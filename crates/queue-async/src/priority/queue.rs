//! [`PriorityQueue`] and [`AddOptions`]: controller-runtime's priority queue.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::PriorityQueueBuilder;
use crate::AddError;
use crate::get::Get;
use crate::handle::Handle;

/// How [`PriorityQueue::add_with`] adds a key: its priority, a delay, rate limiting.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_async::priority::AddOptions;
///
/// let resync = AddOptions::default().priority(-10);
/// let retry = AddOptions::default().rate_limited(true);
/// let later = AddOptions::default().after(Duration::from_secs(5)).priority(3);
/// assert_ne!(later, AddOptions::default());
/// # let _ = (resync, retry);
/// ```
///
/// Setters only, as `std::fs::OpenOptions`: each names what it sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddOptions {
    priority: i32,
    after: Option<Duration>,
    rate_limited: bool,
}

impl AddOptions {
    /// The priority (default 0): higher is handed out first.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Becomes ready after `delay` (at once if zero).
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.after = Some(delay);
        self
    }

    /// Becomes ready after the rate limiter's delay for the key; with [`after`](Self::after)
    /// also set, after the shorter of the two (controller-runtime's rule). The limiter is
    /// charged on every such add, even when the key is already queued.
    #[must_use]
    pub fn rate_limited(mut self, yes: bool) -> Self {
        self.rate_limited = yes;
        self
    }
}

/// A work queue that hands out higher priorities first (FIFO within a priority): initial-list
/// and resync events at a low priority, user changes first. controller-runtime's priority queue,
/// with the guarantees of [`WorkQueue`](crate::WorkQueue): de-duplication, a key never in two
/// workers at once, a cancel-safe [`get`](Self::get), refused adds after shutdown, a full drain,
/// no leaked tasks.
///
/// De-duplication keeps the highest priority a key was added with and its earliest deadline; a
/// raise moves a ready key to the back of its new priority; a priority never drops. A delayed
/// add of a key that will be handed out anyway (ready, or re-added while processing) is
/// absorbed by it. A key that becomes ready after a delay queues by when it became ready; keys
/// due at the same instant with the same priority, in the order of their first delayed add or
/// last raise. [`len`](Self::len) counts ready keys only.
///
/// # Differences from controller-runtime's
///
/// Where a user would notice, this queue does as controller-runtime's (the absorbed delayed add
/// above; the ties above; `workqueue_retries_total` counting only delays above zero; the depth
/// of a key moving with its priority, also while a worker holds it). It differs on purpose in
/// these:
///
/// - **A waiting key added now** queues as of now, behind keys added since its delayed add;
///   controller-runtime keeps the counter of its delayed add and queues it ahead of them. Here
///   the order among ready keys is always the order in which they became ready (as
///   controller-runtime's own for a key whose delay ends), and aging counts from that moment: a
///   key that was not ready has not waited.
/// - **Shutdown** hands out the ready keys first (`get` returns `None` once none is left), as
///   client-go's queues; controller-runtime's `get` returns at once.
///   [`shut_down_with_drain`](Self::shut_down_with_drain) drains; controller-runtime's is a
///   plain shutdown.
/// - **Aging** is available (off by default, see below); controller-runtime has none.
/// - **Options**: [`AddOptions`] has setters only, as `std::fs::OpenOptions`;
///   [`add_with_priority`](Self::add_with_priority) is the short form for a priority alone.
///
/// **Starvation** (kubernetes-sigs/controller-runtime#3496): under a steady stream of
/// high-priority adds, low priorities may never be served. [`PriorityQueueBuilder::aging`] fixes it: with an
/// interval `I`, a key ready for `d` ranks as if its priority were `priority + d / I`, so a key
/// of priority `p` waits at most `(q − p) · I` behind keys of priority `q` that arrive after it. A
/// raise keeps the key's age (`d` counts from the add that made it ready), so it never waits
/// longer for being raised.
/// The order stays a plain heap (every ready key ages at the same rate), O(log n) per operation.
///
/// # Examples
///
/// ```
/// use ctrlq_queue_async::PriorityQueue;
/// use ctrlq_queue_async::priority::AddOptions;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = PriorityQueue::new();
/// queue.add_with("resync/a", AddOptions::default().priority(-10)).unwrap();
/// queue.add_with("user/b", AddOptions::default().priority(10)).unwrap();
/// let item = queue.get().await.unwrap();
/// assert_eq!((*item.key(), item.priority()), ("user/b", 10));
/// # }
/// ```
#[derive(Clone)]
pub struct PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    inner: Arc<Handle<K>>,
}

impl<K> PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(super) fn from_handle(inner: Arc<Handle<K>>) -> Self {
        PriorityQueue { inner }
    }

    /// A queue with no name, no metrics, no aging and the default controller rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: ctrlq_queue_async::PriorityQueue<u64> = ctrlq_queue_async::PriorityQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`PriorityQueueBuilder`] to set the name, metrics, rate limiter and aging.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: ctrlq_queue_async::PriorityQueue<u64> =
    ///     ctrlq_queue_async::PriorityQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> PriorityQueueBuilder<K> {
        PriorityQueueBuilder::new()
    }

    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled. It is
    /// added at priority 0.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert_eq!(queue.add("b").unwrap_err().into_key(), "b");
    /// ```
    pub fn add(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add(key, 0)
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`](crate::workqueue::MAX_DELAY) are clamped.
    /// It is added at priority 0; a delayed add of a key that will be handed out anyway (ready,
    /// or added again while processing) is absorbed by it.
    ///
    /// The wait is timed by a background task, spawned at the first delayed add on the queue's
    /// runtime (see the crate's [Time](crate#time)); with no runtime to time it (none bound yet
    /// and none on this thread), the key is added at once. The task ends at shutdown and when
    /// the last handle is dropped; keys still waiting then are dropped, as in the original.
    ///
    /// The key is never added before its deadline, and is added at the task's first wake-up
    /// after it, together with every other key then due, in deadline order. The task sleeps
    /// until the earliest deadline on tokio's timer (millisecond ticks, so up to about a
    /// millisecond late) and polls nothing in between, so under paused time the clock jumps
    /// straight to the next deadline (a queue with metrics also ticks every
    /// [`UNFINISHED_WORK_UPDATE_PERIOD`](crate::metrics::UNFINISHED_WORK_UPDATE_PERIOD)).
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_after("a", Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 0);
    /// let item = queue.get().await.unwrap(); // the paused clock jumps to the deadline
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), AddError<K>> {
        self.inner.add_after(key, 0, delay)
    }

    /// Adds `key` after the delay the rate limiter gives it
    /// ([`RateLimiter::when`](ctrlq_ratelimit::RateLimiter::when)), at priority 0.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down (the limiter is not
    /// charged).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    /// assert_eq!(queue.num_requeues(&"a"), 1);
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add_rate_limited(key, 0)
    }

    /// Waits for the best ready key: `Some(item)`, with its
    /// [`Item::priority`](crate::Item::priority), or `None` once the queue is shut down and
    /// empty.
    ///
    /// See [`Get`] for cancel safety.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add("a").unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn get(&self) -> Get<'_, K> {
        Get::new(&self.inner)
    }

    /// Clears the rate limiter's history of `key` (call it when the key succeeded).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::<u32>::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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
    /// let queue = ctrlq_queue_async::PriorityQueue::<u32>::new();
    /// queue.shut_down();
    /// assert!(queue.is_shutting_down());
    /// ```
    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shutting_down()
    }

    /// Adds every key whose delay is over at this instant, so that a test that advanced the
    /// paused clock sees them queued without letting the timer task run first (client-go's
    /// "wait for the waiting loop" helper).
    ///
    /// It completes at its first poll: the keys are added by the caller, not by the timer task.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
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

    /// Adds `key` as `options` say: at its priority, now or after a delay and/or the rate
    /// limiter's delay.
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with the key if the queue is shutting down (the limiter is not
    /// charged).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ctrlq_queue_async::priority::AddOptions;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_with("a", AddOptions::default().after(Duration::from_secs(1)).priority(2)).unwrap();
    /// assert_eq!(queue.len(), 0); // not ready yet
    /// assert_eq!(queue.get().await.unwrap().priority(), 2);
    /// # }
    /// ```
    pub fn add_with(&self, key: K, options: AddOptions) -> Result<(), AddError<K>> {
        let mut delay = options.after.unwrap_or_default();
        if options.rate_limited {
            if self.inner.is_shutting_down() {
                return Err(AddError::ShutDown(key));
            }
            // controller-runtime's rule: the limiter's delay, or `after` if that is shorter.
            let limited = self.inner.rate_limit_delay(&key);
            if delay.is_zero() || limited < delay {
                delay = limited;
            }
        }
        if delay.is_zero() {
            self.inner.add(key, options.priority)
        } else {
            self.inner.add_after(key, options.priority, delay)
        }
    }

    /// Adds `key` now at `priority`: short for
    /// [`add_with`](Self::add_with)`(key, AddOptions::default().priority(priority))`.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_with_priority("low", -1).unwrap();
    /// queue.add_with_priority("high", 5).unwrap();
    /// assert_eq!(queue.get().await.unwrap().priority(), 5);
    /// # }
    /// ```
    pub fn add_with_priority(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        self.inner.add(key, priority)
    }
}

impl<K> Default for PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.describe(f, "PriorityQueue")
    }
}
