//! [`PriorityQueue`] and [`AddOptions`]: controller-runtime's priority queue.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::PriorityQueueBuilder;
use crate::AddError;
use crate::get::Get;
use crate::shared::Shared;

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
    inner: Arc<Shared<K>>,
}

impl<K> PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    pub(super) fn from_handle(inner: Arc<Shared<K>>) -> Self {
        PriorityQueue { inner }
    }

    /// A queue with no name, no metrics, no aging and the default controller rate limiter
    /// (see [`WorkQueue::new`](crate::WorkQueue::new)).
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`PriorityQueueBuilder`] to set the name, metrics, rate limiter and aging.
    pub fn builder() -> PriorityQueueBuilder<K> {
        PriorityQueueBuilder::new()
    }

    /// [`WorkQueue::add`](crate::WorkQueue::add), at priority 0.
    pub fn add(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add(key, 0)
    }

    /// [`WorkQueue::add_after`](crate::WorkQueue::add_after), at priority 0; a delayed add of a
    /// key that will be handed out anyway (ready, or added again while processing) is absorbed
    /// by it.
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), AddError<K>> {
        self.inner.add_after(key, 0, delay)
    }

    /// [`WorkQueue::add_rate_limited`](crate::WorkQueue::add_rate_limited), at priority 0.
    pub fn add_rate_limited(&self, key: K) -> Result<(), AddError<K>> {
        self.inner.add_rate_limited(key, 0)
    }

    /// Waits for the best ready key, as [`WorkQueue::get`](crate::WorkQueue::get): its item
    /// tells the priority it was handed out at ([`Item::priority`](crate::Item::priority)).
    pub fn get(&self) -> Get<'_, K> {
        Get::new(&self.inner)
    }

    /// [`WorkQueue::forget`](crate::WorkQueue::forget).
    pub fn forget(&self, key: &K) {
        self.inner.forget(key);
    }

    /// [`WorkQueue::num_requeues`](crate::WorkQueue::num_requeues).
    pub fn num_requeues(&self, key: &K) -> usize {
        self.inner.num_requeues(key)
    }

    /// [`WorkQueue::done`](crate::WorkQueue::done).
    pub fn done(&self, key: &K) {
        self.inner.done(key);
    }

    /// [`WorkQueue::len`](crate::WorkQueue::len): the keys ready to be handed out.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// [`WorkQueue::is_empty`](crate::WorkQueue::is_empty).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`WorkQueue::waiting_len`](crate::WorkQueue::waiting_len).
    pub fn waiting_len(&self) -> usize {
        self.inner.waiting_len()
    }

    /// [`WorkQueue::processing_len`](crate::WorkQueue::processing_len).
    pub fn processing_len(&self) -> usize {
        self.inner.processing_len()
    }

    /// [`WorkQueue::shut_down`](crate::WorkQueue::shut_down).
    pub fn shut_down(&self) {
        self.inner.shut_down(false);
    }

    /// [`WorkQueue::shut_down_with_drain`](crate::WorkQueue::shut_down_with_drain) (cancel
    /// safe).
    pub async fn shut_down_with_drain(&self) {
        self.inner.shut_down(true);
        self.inner.wait_drained().await;
    }

    /// [`WorkQueue::is_shutting_down`](crate::WorkQueue::is_shutting_down).
    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shutting_down()
    }

    /// [`WorkQueue::settle`](crate::WorkQueue::settle).
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
        // Whether the delay is the limiter's: a failure's backoff (see `InBackoff`).
        let mut backoff = false;
        if options.rate_limited {
            if self.inner.is_shutting_down() {
                return Err(AddError::ShutDown(key));
            }
            // controller-runtime's rule: the limiter's delay, or `after` if that is shorter.
            let limited = self.inner.rate_limit_delay(&key);
            if delay.is_zero() || limited < delay {
                delay = limited;
                backoff = true;
            }
        }
        if delay.is_zero() {
            self.inner.add(key, options.priority)
        } else {
            self.inner
                .add_after_as(key, options.priority, delay, backoff)
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

    /// Adds every `(key, priority)` of `keys`, in order, as
    /// [`add_with_priority`](Self::add_with_priority) would one by one, under one hold of the
    /// queue's lock (see [`WorkQueue::add_all`](crate::WorkQueue::add_all)).
    ///
    /// # Errors
    ///
    /// [`AddError::ShutDown`] with every pair of `keys` if the queue is shutting down: none
    /// was added.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = ctrlq_queue_async::PriorityQueue::new();
    /// queue.add_all_with_priority([("listed", -100), ("changed", 0), ("listed", -100)]).unwrap();
    /// assert_eq!(queue.len(), 2);
    /// assert_eq!(*queue.get().await.unwrap().key(), "changed");
    /// # }
    /// ```
    pub fn add_all_with_priority(
        &self,
        keys: impl IntoIterator<Item = (K, i32)>,
    ) -> Result<(), AddError<Vec<(K, i32)>>> {
        self.inner
            .add_all_at(keys.into_iter().collect(), |pair| pair)
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
