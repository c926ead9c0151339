//! [`WorkQueue`]: the handle, its builder and the shared state.

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashMap;
use queue_core::{AddOutcome, DoneOutcome, PopOutcome, WorkState};
use ratelimit::RateLimiter;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::debug;

use super::delay::{self, Command};
use super::get::Get;
use crate::ShutDown;
use crate::metrics::{MetricsProvider, Recorder, UNFINISHED_WORK_UPDATE_PERIOD};

/// The longest delay `add_after` honours; longer delays are clamped to it (365 days).
///
/// tokio-util's `DelayQueue` panics about two years out; a year is far beyond any useful retry.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A de-duplicating work queue that worker tasks await on: client-go's work queue with its
/// delaying and rate-limiting layers, in one cheap [`Clone`] handle.
///
/// - [`add`](Self::add) queues a key unless it is already queued; a key being processed is queued
///   again when its worker is done, so one key is never handed to two workers at once.
/// - [`get`](Self::get) awaits the next key and hands it out as an [`Item`](super::Item), a guard
///   that marks the key done when dropped.
/// - [`add_after`](Self::add_after) and [`add_rate_limited`](Self::add_rate_limited) add later,
///   from a background task that sleeps until exactly the next deadline.
/// - [`shut_down`](Self::shut_down) stops new adds; `get` still returns what is queued, then
///   `None`. [`shut_down_with_drain`](Self::shut_down_with_drain) also waits until everything queued
///   and in flight is done.
///
/// Differences from the original, all deliberate: an add after shutdown is refused with the key
/// back ([`ShutDown`]) rather than dropped; draining waits for queued items too; an `add` of a
/// key that waits for its delay removes the waiting entry instead of running the key twice; a
/// forgotten `done` cannot wedge a key (the guard marks it done on drop); background tasks end
/// on shutdown and with the last handle.
///
/// # Examples
///
/// ```
/// use queue_async::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = WorkQueue::new();
/// queue.add("ns/a").unwrap();
/// queue.add("ns/a").unwrap(); // coalesced
/// assert_eq!(queue.len(), 1);
///
/// let worker = {
///     let queue = queue.clone();
///     tokio::spawn(async move {
///         let mut seen = Vec::new();
///         while let Some(item) = queue.get().await {
///             seen.push(*item.key());
///             item.done();
///         }
///         seen
///     })
/// };
/// queue.shut_down_with_drain().await;
/// assert_eq!(worker.await.unwrap(), ["ns/a"]);
/// # }
/// ```
pub struct WorkQueue<K> {
    pub(crate) shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .field("len", &state.work.len())
            .field("processing", &state.work.processing_len())
            .field("waiting", &state.waiting.len())
            .field("shutting_down", &state.work.is_shut_down())
            .finish()
    }
}

/// Builds a [`WorkQueue`]: its name (the metrics label), metrics provider and rate limiter.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use queue_async::WorkQueue;
/// use ratelimit::ExponentialRateLimiter;
///
/// let limiter = ExponentialRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1)).unwrap();
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .name("pods")
///     .rate_limiter(Arc::new(limiter))
///     .build();
/// assert!(queue.is_empty());
/// ```
pub struct Builder<K> {
    name: String,
    metrics: Option<Arc<dyn MetricsProvider>>,
    limiter: Option<Arc<dyn RateLimiter<K>>>,
}

impl<K> fmt::Debug for Builder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some())
            .finish()
    }
}

impl<K> Builder<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// The queue's name: the `name` label of its metrics (metrics need a non-empty name).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Reports client-go's seven metrics through `provider` (with a non-empty [`name`](Self::name)).
    #[must_use]
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// The limiter behind [`add_rate_limited`](WorkQueue::add_rate_limited); by default
    /// [`ratelimit::default_controller_rate_limiter`].
    #[must_use]
    pub fn rate_limiter(mut self, limiter: Arc<dyn RateLimiter<K>>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Builds the queue. Nothing is spawned yet: the delay task starts with the first delayed
    /// add and the metrics task with the first add, each in the runtime of that call.
    pub fn build(self) -> WorkQueue<K> {
        let recorder = match &self.metrics {
            Some(provider) => Recorder::new(&self.name, provider.clone()),
            None => Recorder::disabled(),
        };
        let limiter = self
            .limiter
            .unwrap_or_else(|| Arc::new(ratelimit::default_controller_rate_limiter()));
        WorkQueue {
            shared: Arc::new(Shared {
                name: self.name,
                state: Mutex::new(State {
                    work: WorkState::new(),
                    waiting: HashMap::new(),
                    delay_tx: None,
                    recorder,
                    metrics_task: false,
                    draining: false,
                }),
                get_wake: Notify::new(),
                idle_wake: Notify::new(),
                limiter,
                shut_down_flag: AtomicBool::new(false),
            }),
        }
    }
}

/// State shared by every handle, item guard and the background tasks (the tasks hold it weakly).
pub(crate) struct Shared<K> {
    name: String,
    state: Mutex<State<K>>,
    /// Wakes `get`s: one per queued key, all at shutdown.
    pub(crate) get_wake: Notify,
    /// Wakes drainers when the queue becomes idle or shutdown is forced.
    idle_wake: Notify,
    limiter: Arc<dyn RateLimiter<K>>,
    shut_down_flag: AtomicBool,
}

pub(crate) struct State<K> {
    pub(crate) work: WorkState<K>,
    /// Keys waiting for their delay, with their deadline (the delay task's timer entries are
    /// only alarms: this map decides).
    pub(crate) waiting: HashMap<K, Instant>,
    delay_tx: Option<mpsc::UnboundedSender<Command<K>>>,
    pub(crate) recorder: Recorder<K>,
    metrics_task: bool,
    /// A `shut_down_with_drain` is waiting.
    draining: bool,
}

/// What the caller of an operation must do after releasing the lock.
#[derive(Default)]
#[must_use]
struct Wake {
    one_getter: bool,
    idle: bool,
}

impl<K> Shared<K> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State<K>> {
        // parking_lot's lock does not poison: a user's Hash/Eq panicking under it leaves the
        // state consistent (every transition completes or changes nothing before it can panic).
        self.state.lock()
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn wake(&self, wake: Wake) {
        if wake.one_getter {
            self.get_wake.notify_one();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Adds `key` now, under the lock.
    fn add_locked(&self, state: &mut State<K>, key: K, wake: &mut Wake) -> Result<(), ShutDown<K>> {
        if state.waiting.remove(&key).is_some() {
            // Added now: the waiting entry is void (its alarm finds nothing and is ignored).
            if let Some(tx) = &state.delay_tx {
                let _ = tx.send(Command::Cancel(key.clone()));
            }
        }
        // The recorder needs the key after `add` took it: clone only when metrics are on.
        let metric_key = state.recorder.is_enabled().then(|| key.clone());
        match state.work.add(key) {
            AddOutcome::Queued => {
                if let Some(k) = &metric_key {
                    state.recorder.add(k);
                }
                wake.one_getter = true;
                Ok(())
            }
            AddOutcome::Deferred => {
                // Dirty while processing: counted by depth and adds, as the original.
                if let Some(k) = &metric_key {
                    state.recorder.add(k);
                }
                Ok(())
            }
            AddOutcome::Coalesced => Ok(()),
            AddOutcome::Refused(key) => Err(ShutDown(key)),
        }
    }

    /// The delay task's alarm for `key` at `deadline` rang.
    pub(crate) fn fire(&self, key: K, deadline: Instant) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            if state.waiting.get(&key) != Some(&deadline) {
                return; // cancelled by an add now, or superseded
            }
            state.waiting.remove(&key);
            debug!(queue = %self.name, "delay over; adding");
            let _ = self.add_locked(&mut state, key, &mut wake);
        }
        self.wake(wake);
    }

    /// Takes the next key for a worker: `Some(Some(key))`, `Some(None)` once shut down and
    /// empty, `None` to wait.
    pub(crate) fn try_get(&self) -> Option<Option<K>> {
        let mut state = self.lock();
        match state.work.pop() {
            PopOutcome::Item(key) => {
                state.recorder.get(&key);
                Some(Some(key))
            }
            PopOutcome::Empty => None,
            PopOutcome::ShutDown => Some(None),
        }
    }

    pub(crate) fn done(&self, key: &K) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            state.recorder.done(key);
            match state.work.done(key) {
                // Counted by the metrics when it became dirty, not again here (as the original).
                DoneOutcome::Requeued => wake.one_getter = true,
                DoneOutcome::Finished | DoneOutcome::NotProcessing => {}
            }
            wake.idle = state.draining && state.work.is_idle();
        }
        self.wake(wake);
    }

    pub(crate) fn add_after(self: &Arc<Self>, key: K, delay: Duration) -> Result<(), ShutDown<K>> {
        let mut wake = Wake::default();
        let result = {
            let mut state = self.lock();
            if state.work.is_shut_down() {
                return Err(ShutDown(key));
            }
            state.recorder.retry();
            if delay.is_zero() {
                self.add_locked(&mut state, key, &mut wake)
            } else {
                self.ensure_metrics_task(&mut state);
                self.wait_locked(&mut state, key, delay.min(MAX_DELAY), &mut wake)
            }
        };
        self.wake(wake);
        result
    }

    /// Records `key` as waiting until now + `delay` (keeping an earlier deadline) and sets the
    /// delay task's alarm.
    fn wait_locked(
        self: &Arc<Self>,
        state: &mut State<K>,
        key: K,
        delay: Duration,
        wake: &mut Wake,
    ) -> Result<(), ShutDown<K>> {
        let deadline = Instant::now() + delay;
        if let Some(current) = state.waiting.get(&key)
            && *current <= deadline
        {
            return Ok(()); // already waiting with an earlier deadline
        }
        if state.delay_tx.is_none() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    runtime.spawn(delay::run(Arc::downgrade(self), rx, self.name.clone()));
                    state.delay_tx = Some(tx);
                }
                Err(_) => {
                    // No runtime to time the delay: add now rather than lose the key.
                    debug!(queue = %self.name, "add_after outside a tokio runtime; adding now");
                    return self.add_locked(state, key, wake);
                }
            }
        }
        state.waiting.insert(key.clone(), deadline);
        if let Some(tx) = &state.delay_tx {
            let _ = tx.send(Command::Wait(key, deadline));
        }
        Ok(())
    }

    fn shut_down(&self, drain: bool) -> bool {
        let first = {
            let mut state = self.lock();
            let first = state.work.shut_down();
            self.shut_down_flag.store(true, Ordering::Release);
            // Waiting keys are never added now: drop them and end the delay task.
            state.waiting.clear();
            state.delay_tx = None;
            state.draining = drain;
            first
        };
        if first {
            debug!(queue = %self.name, drain, "shutting down");
        }
        self.get_wake.notify_waiters();
        if !drain {
            // A forced shutdown cuts a drain short.
            self.idle_wake.notify_waiters();
        }
        first
    }

    fn ensure_metrics_task(self: &Arc<Self>, state: &mut State<K>) {
        if state.metrics_task || !state.recorder.is_enabled() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            state.metrics_task = true;
            runtime.spawn(metrics_loop(Arc::downgrade(self)));
        }
    }
}

/// Refreshes the unfinished-work gauges every period until shutdown or the last handle drops.
async fn metrics_loop<K>(shared: Weak<Shared<K>>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    let mut tick = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.shut_down_flag.load(Ordering::Acquire) {
            return;
        }
        shared.lock().recorder.update_unfinished_work();
    }
}

// ===== impl WorkQueue =====

impl<K> Default for WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K> WorkQueue<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    /// A queue with no name, no metrics and the default controller rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::WorkQueue<u64> = queue_async::WorkQueue::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A [`Builder`] to set the name, metrics and rate limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue: queue_async::WorkQueue<u64> = queue_async::WorkQueue::builder().name("q").build();
    /// assert!(queue.is_empty());
    /// ```
    pub fn builder() -> Builder<K> {
        Builder {
            name: String::new(),
            metrics: None,
            limiter: None,
        }
    }

    /// Queues `key` unless it is queued already; a key being processed is queued again when its
    /// worker is done. A key waiting for a delay is added now and its wait is cancelled.
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// queue.shut_down();
    /// assert_eq!(queue.add("b").unwrap_err().into_key(), "b");
    /// ```
    pub fn add(&self, key: K) -> Result<(), ShutDown<K>> {
        let mut wake = Wake::default();
        let result = {
            let mut state = self.shared.lock();
            let r = self.shared.add_locked(&mut state, key, &mut wake);
            self.shared.ensure_metrics_task(&mut state);
            r
        };
        self.shared.wake(wake);
        result
    }

    /// Adds `key` once `delay` has passed (at once if `delay` is zero). A key already waiting
    /// keeps the earlier of its two deadlines; delays beyond [`MAX_DELAY`] are clamped.
    ///
    /// The wait is timed by a background task, spawned on the current tokio runtime at the first
    /// delayed add (outside a runtime the key is added at once). It ends at shutdown and when the
    /// last handle is dropped; keys still waiting then are dropped, as in the original.
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 0);
    /// let item = queue.get().await.unwrap(); // the paused clock jumps to the deadline
    /// assert_eq!(*item.key(), "a");
    /// # }
    /// ```
    pub fn add_after(&self, key: K, delay: Duration) -> Result<(), ShutDown<K>> {
        self.shared.add_after(key, delay)
    }

    /// Adds `key` after the delay the rate limiter gives it ([`RateLimiter::when`]).
    ///
    /// # Errors
    ///
    /// [`ShutDown`] with the key if the queue is shutting down (the limiter is not charged).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_rate_limited("a").unwrap(); // 5 ms with the default limiter
    /// assert_eq!(queue.num_requeues(&"a"), 1);
    /// queue.forget(&"a");
    /// assert_eq!(queue.num_requeues(&"a"), 0);
    /// # }
    /// ```
    pub fn add_rate_limited(&self, key: K) -> Result<(), ShutDown<K>> {
        if self.is_shutting_down() {
            return Err(ShutDown(key));
        }
        let delay = self.shared.limiter.when(&key);
        self.shared.add_after(key, delay)
    }

    /// Clears the rate limiter's history of `key` (call it when the key succeeded).
    pub fn forget(&self, key: &K) {
        self.shared.limiter.forget(key);
    }

    /// How many times the rate limiter has delayed `key` since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> usize {
        self.shared.limiter.num_requeues(key)
    }

    /// Waits for the next key: `Some(item)`, or `None` once the queue is shut down and empty.
    ///
    /// See [`Get`] for cancel safety.
    pub fn get(&self) -> Get<'_, K> {
        Get::new(self)
    }

    /// Marks `key` done: for keys taken out of an item with [`Item::into_key`](super::Item::into_key).
    /// If the key was added while it was processed, it is queued again now. A key that is not
    /// being processed is ignored.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let key = queue.get().await.unwrap().into_key();
    /// queue.add("a").unwrap(); // while processing: queued again at done
    /// assert_eq!(queue.len(), 0);
    /// queue.done(&key);
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    pub fn done(&self, key: &K) {
        self.shared.done(key);
    }

    /// Keys queued and ready, not counting those being processed or waiting for a delay.
    pub fn len(&self) -> usize {
        self.shared.lock().work.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: adds are refused, keys waiting for a delay are dropped, `get` returns
    /// what is queued and then `None`. Cuts a running [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// short. Idempotent.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add(1).unwrap();
    /// queue.shut_down();
    /// assert!(queue.get().await.is_some()); // queued before the shutdown
    /// assert!(queue.get().await.is_none());
    /// # }
    /// ```
    pub fn shut_down(&self) {
        self.shared.shut_down(false);
    }

    /// Shuts down like [`shut_down`](Self::shut_down), then waits until every queued key has been
    /// handed out and every handed-out key is done (the original waits for in-flight keys only).
    /// A concurrent `shut_down` ends the wait early.
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
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add("a").unwrap();
    /// let worker = queue.clone();
    /// tokio::spawn(async move { while let Some(item) = worker.get().await { item.done() } });
    /// queue.shut_down_with_drain().await;
    /// assert!(queue.is_empty());
    /// # }
    /// ```
    pub async fn shut_down_with_drain(&self) {
        self.shared.shut_down(true);
        loop {
            let idle = self.shared.idle_wake.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let state = self.shared.lock();
                if state.work.is_idle() || !state.draining {
                    return;
                }
            }
            idle.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) or [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.shut_down_flag.load(Ordering::Acquire)
    }

    /// Waits until the delay task has taken in every delayed add made so far, so that a test
    /// that then advances the paused clock sees them fire (client-go's "wait for the waiting
    /// loop" helper).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let queue = queue_async::WorkQueue::new();
    /// queue.add_after("a", Duration::from_millis(50)).unwrap();
    /// queue.settle().await;
    /// tokio::time::advance(Duration::from_millis(50)).await;
    /// queue.settle().await;
    /// assert_eq!(queue.len(), 1);
    /// # }
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub async fn settle(&self) {
        let rx = {
            let state = self.shared.lock();
            let Some(tx) = &state.delay_tx else {
                return;
            };
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            if tx.send(Command::Sync(done_tx)).is_err() {
                return;
            }
            done_rx
        };
        let _ = rx.await;
    }

    /// The number of keys waiting for their delay.
    pub fn waiting_len(&self) -> usize {
        self.shared.lock().waiting.len()
    }

    /// The number of keys handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        self.shared.lock().work.processing_len()
    }
}
