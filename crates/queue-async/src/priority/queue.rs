//! [`PriorityQueue`], its [`Builder`] and [`AddOptions`].

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use queue_core::PriorityState;
use ratelimit::RateLimiter;

use crate::ShutDownError;
use crate::core::handle::{Options, builder_methods, handle_methods};
use crate::core::{Backend, Shared};
use crate::get::Get;
use crate::metrics::MetricsProvider;

/// How [`PriorityQueue::add_with`] adds a key: its priority, a delay, rate limiting.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use queue_async::priority::AddOptions;
///
/// let resync = AddOptions::default().priority(-10);
/// let retry = AddOptions::default().rate_limited(true);
/// let later = AddOptions::default().after(Duration::from_secs(5)).priority(3);
/// assert_eq!(later.get_priority(), 3);
/// # let _ = (resync, retry);
/// ```
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

    /// The priority set.
    pub fn get_priority(&self) -> i32 {
        self.priority
    }
}

/// A work queue that hands out higher priorities first (FIFO within a priority): initial-list
/// and resync events at a low priority, user changes first. controller-runtime's priority queue,
/// with the guarantees of [`WorkQueue`](crate::WorkQueue): de-duplication, a key never in two
/// workers at once, a cancel-safe [`get`](Self::get), refused adds after shutdown, a full drain,
/// no leaked tasks.
///
/// De-duplication keeps the highest priority a key was added with and its earliest deadline; a
/// raise moves a ready key to the back of its new priority; a priority never drops. A key that
/// becomes ready after a delay queues by when it became ready. [`len`](Self::len) counts ready
/// keys only.
///
/// **Starvation** (kubernetes-sigs/controller-runtime#3496): under a steady stream of
/// high-priority adds, low priorities may never be served. [`Builder::aging`] fixes it: with an
/// interval `I`, a key ready for `d` ranks as if its priority were `priority + d / I`, so a key
/// of priority `p` waits at most `(q − p) · I` behind keys of priority `q` that arrive after it.
/// The order stays a plain heap (every ready key ages at the same rate), O(log n) per operation.
///
/// # Examples
///
/// ```
/// use queue_async::PriorityQueue;
/// use queue_async::priority::AddOptions;
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
pub struct PriorityQueue<K> {
    core: Arc<dyn Backend<K, i32>>,
}

impl<K> Clone for PriorityQueue<K> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<K> fmt::Debug for PriorityQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.describe(f, "PriorityQueue")
    }
}

/// Builds a [`PriorityQueue`]: name (the metrics label), metrics, rate limiter and aging.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let queue: queue_async::PriorityQueue<String> = queue_async::PriorityQueue::builder()
///     .name("controller")
///     .aging(Duration::from_secs(10))
///     .build();
/// assert!(queue.is_empty());
/// ```
pub struct Builder<K> {
    options: Options<K>,
    aging: Option<Duration>,
}

impl<K> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.options.name)
            .field("metrics", &self.options.metrics.is_some())
            .field("rate_limiter", &self.options.limiter.is_some())
            .field("aging", &self.aging)
            .finish()
    }
}

impl<K> Builder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    builder_methods!();

    /// Ages ready keys: waiting `interval` counts as one priority more (see the type's docs).
    /// Off by default (controller-runtime's behaviour); a zero interval also means off.
    #[must_use]
    pub fn aging(mut self, interval: Duration) -> Self {
        self.aging = Some(interval);
        self
    }

    /// Builds the queue; background tasks start with the first delayed add (or, with metrics,
    /// the first add), in the runtime of that call.
    pub fn build(self) -> PriorityQueue<K> {
        let aging = self
            .aging
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        PriorityQueue {
            core: Shared::new(PriorityState::new(aging), self.options),
        }
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

impl<K> PriorityQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue with no name, no metrics, no aging and the default controller rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::PriorityQueue<u32> = queue_async::PriorityQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`Builder`].
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::PriorityQueue<u32> =
    ///     queue_async::PriorityQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> Builder<K> {
        Builder {
            options: Options::default(),
            aging: None,
        }
    }

    /// Adds `key` as `options` say: at its priority, now or after a delay and/or the rate
    /// limiter's delay.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down (the limiter is not charged).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use queue_async::priority::AddOptions;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::PriorityQueue::new();
    /// queue.add_with("a", AddOptions::default().after(Duration::from_secs(1)).priority(2)).unwrap();
    /// assert_eq!(queue.len(), 0); // not ready yet
    /// assert_eq!(queue.get().await.unwrap().priority(), 2);
    /// # }
    /// ```
    pub fn add_with(&self, key: K, options: AddOptions) -> Result<(), ShutDownError<K>> {
        let mut delay = options.after.unwrap_or_default();
        if options.rate_limited {
            if self.core.is_shutting_down() {
                return Err(ShutDownError(key));
            }
            // controller-runtime's rule: the limiter's delay, or `after` if that is shorter.
            let limited = self.core.rate_limit_delay(&key);
            if delay.is_zero() || limited < delay {
                delay = limited;
            }
        }
        if delay.is_zero() {
            self.core.add(key, options.priority)
        } else {
            self.core.clone().add_after(key, options.priority, delay)
        }
    }

    /// Adds `key` now at priority 0.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = queue_async::PriorityQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert!(queue.add("b").is_err());
    /// ```
    pub fn add(&self, key: K) -> Result<(), ShutDownError<K>> {
        self.core.add(key, 0)
    }

    /// [`add`](Self::add) at priority 0, by reference: the key is cloned only if the queue keeps it. Adding a
    /// key that is already queued, the common case when events for one object come in bursts,
    /// clones nothing; with `Arc` keys, no reference count is touched, which matters when
    /// several producers add the same keys from different threads.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with a clone of the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let queue = queue_async::PriorityQueue::new();
    /// let key: Arc<str> = Arc::from("ns/obj");
    /// queue.add_ref(&key).unwrap();
    /// queue.add_ref(&key).unwrap();
    /// assert_eq!(queue.len(), 1);
    /// assert_eq!(Arc::strong_count(&key), 2, "one clone, held by the queue");
    /// ```
    pub fn add_ref(&self, key: &K) -> Result<(), ShutDownError<K>> {
        self.core.add_ref(key, 0)
    }

    /// Adds `key` at priority 0 after `delay`.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::PriorityQueue::new();
    /// queue.add_after("a", std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 0);
    /// assert_eq!(*queue.get().await.unwrap(), "a"); // the paused clock jumps 1 s
    /// # }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), ShutDownError<K>> {
        self.add_with(key, AddOptions::default().after(delay))
    }

    /// Adds `key` at priority 0 after the rate limiter's delay.
    ///
    /// # Errors
    ///
    /// [`ShutDownError`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::PriorityQueue::new();
    /// queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    /// assert_eq!(queue.num_requeues(&"a"), 1);
    /// # }
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Result<(), ShutDownError<K>> {
        self.add_with(key, AddOptions::default().rate_limited(true))
    }

    /// Waits for the best ready key: `Some(item)` (with [`Item::priority`](crate::Item::priority)),
    /// or `None` once shut down and empty. See [`Get`] for cancel safety.
    ///
    /// # Examples
    ///
    /// ```
    /// use queue_async::priority::AddOptions;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::PriorityQueue::new();
    /// queue.add_with("low", AddOptions::default().priority(-1)).unwrap();
    /// queue.add_with("high", AddOptions::default().priority(1)).unwrap();
    /// let item = queue.get().await.unwrap();
    /// assert_eq!((*item.key(), item.priority()), ("high", 1));
    /// # }
    /// ```
    pub fn get(&self) -> Get<'_, K, i32> {
        Get::new(&self.core)
    }

    handle_methods!("PriorityQueue");
}
