//! What the work queue and the priority queue share: [`Shared`], the state behind a handle.
//!
//! Two locks (parking_lot, never held across an `.await`):
//!
//! - `state` guards the state machine, the metrics recorder and the metrics task: every add,
//!   get and done takes it;
//! - `timers` guards the waiting keys, their timers ([`Timers`]) and the delay task: delayed
//!   adds and the delay task take it.
//!
//! A delayed add sets its timer without holding `state`, and the delay task takes the due keys
//! under `timers` alone, then adds them under `state`: neither holds up the workers' gets and
//! dones while it works on the timers. When both are held, `state` is taken first. Three
//! `Notify`s carry the wake-ups: `get_wake` (one waiting `get` per queued key), `stream_wake`
//! (every waiting stream) and `idle_wake` (drains). The protocol is in the crate's design docs.

mod machine;
mod stream;
mod tasks;
mod timers;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ctrlq_queue_core::PopOutcome;
use ctrlq_ratelimit::RateLimiter;
use hashbrown::HashSet;
use parking_lot::{Mutex, MutexGuard};
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use self::machine::{Added, DoneWith};
pub(crate) use self::machine::{Machine, Payload, QueueKey};
pub(crate) use self::stream::StreamWait;
use self::timers::Timers;

use crate::clock::QueueClock;
use crate::error::ShutDownError;
use crate::metrics::{MetricsProvider, Recorder};
use crate::task::BackgroundTask;
use crate::wait::Source;

/// The longest delay honoured by delayed adds; longer delays are clamped to it (365 days).
///
/// tokio-util's `DelayQueue` panics about two years out; a year is far beyond any useful retry.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The builder options every queue has.
pub(crate) struct Options<K> {
    pub(crate) name: String,
    pub(crate) metrics: Option<Arc<dyn MetricsProvider>>,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
}

impl<K> Default for Options<K> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics: None,
            limiter: None,
        }
    }
}

impl<K> fmt::Debug for Options<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some())
            .finish()
    }
}

/// The state behind a [`WorkQueue`](crate::WorkQueue) (`P = ()`) or a
/// [`PriorityQueue`](crate::PriorityQueue) (`P = i32`).
pub(crate) struct Shared<K: QueueKey, P: Payload> {
    name: String,
    state: Mutex<State<K, P>>,
    /// Taken after `state` when both are held.
    timers: Mutex<TimerState<K, P>>,
    /// How many keys wait (mirrors `timers`), so that an add skips the timers' lock when none
    /// does.
    waiting: AtomicUsize,
    /// Woken once per key queued: one waiting `get` takes it.
    get_wake: Notify,
    /// Woken for every key queued while a stream waits: every waiting stream looks.
    stream_wake: Notify,
    /// Woken when a drain may be over.
    idle_wake: Notify,
    limiter: Arc<dyn RateLimiter<K>>,
    /// Mirrors the machine's shutdown, read without the lock.
    shutting_down: AtomicBool,
    /// Read for priority aging, the metrics and deadlines, so that calls from any thread share
    /// the runtime's clock.
    clock: QueueClock,
    origin: Instant,
}

/// Guarded by [`Shared::state`].
struct State<K: QueueKey, P: Payload> {
    machine: P::Machine<K>,
    recorder: Recorder<K>,
    /// Refreshes the unfinished-work gauges.
    metrics_task: BackgroundTask,
    draining: bool,
    /// Streams waiting for a key (each registered in `stream_wake`).
    streams_waiting: usize,
    /// Keys handed out and taken out of their item with `into_key`: the only hand-outs the
    /// handle's `done` ends. Every other hand-out is ended by its item alone, so a `done` never
    /// ends a later hand-out of the same key.
    detached: HashSet<K>,
}

/// Guarded by [`Shared::timers`].
struct TimerState<K: QueueKey, P: Payload> {
    timers: Timers<K, P>,
    /// Polls `timers` and adds the keys that are due.
    delay_task: BackgroundTask,
    /// Set by the queue's shutdown: no key waits after it.
    shut_down: bool,
}

/// What to wake once the lock is released.
#[derive(Default)]
#[must_use]
struct Wake {
    getters: usize,
    idle: bool,
}

impl<K: QueueKey, P: Payload> Shared<K, P> {
    fn lock(&self) -> MutexGuard<'_, State<K, P>> {
        // parking_lot's lock does not poison; every transition completes or changes nothing
        // before a user's Hash/Eq could panic under it.
        self.state.lock()
    }

    fn lock_timers(&self) -> MutexGuard<'_, TimerState<K, P>> {
        self.timers.lock()
    }

    /// Publishes how many keys wait; call before releasing the timers' lock after a change.
    fn count_waiting(&self, timers: &TimerState<K, P>) {
        self.waiting.store(timers.timers.len(), Ordering::Release);
    }
}

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    pub(crate) fn new(machine: P::Machine<K>, options: Options<K>) -> Arc<Self> {
        let Options {
            name,
            metrics,
            limiter,
        } = options;
        let recorder = match metrics {
            Some(provider) => Recorder::new(&name, provider),
            None => Recorder::disabled(),
        };
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        Arc::new(Shared {
            name,
            state: Mutex::new(State {
                machine,
                recorder,
                metrics_task: BackgroundTask::default(),
                draining: false,
                streams_waiting: 0,
                detached: HashSet::new(),
            }),
            timers: Mutex::new(TimerState {
                timers: Timers::new(),
                delay_task: BackgroundTask::default(),
                shut_down: false,
            }),
            waiting: AtomicUsize::new(0),
            get_wake: Notify::new(),
            stream_wake: Notify::new(),
            idle_wake: Notify::new(),
            limiter,
            shutting_down: AtomicBool::new(false),
            origin: clock.now(),
            clock,
        })
    }

    fn now_nanos(&self) -> u64 {
        if <P::Machine<K> as Machine<K>>::NEEDS_TIME {
            let since = self.clock.now().saturating_duration_since(self.origin);
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        }
    }

    #[inline(always)]
    fn wake(&self, wake: Wake, streams: bool) {
        for _ in 0..wake.getters {
            self.get_wake.notify_one();
        }
        if streams && wake.getters > 0 {
            self.stream_wake.notify_waiters();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Runs `f` under the lock, then wakes what it asked for.
    fn with_lock<R>(&self, f: impl FnOnce(&mut State<K, P>, &mut Wake) -> R) -> R {
        let mut wake = Wake::default();
        let (r, streams) = {
            let mut state = self.lock();
            let r = f(&mut state, &mut wake);
            (r, state.streams_waiting > 0)
        };
        self.wake(wake, streams);
        r
    }

    // ----- adds -----

    /// Adds `key` now; a borrowed key is cloned only if the queue keeps it.
    ///
    /// The crate's hottest path. It is written out rather than passed to `with_lock` as a
    /// closure, and every step down to the state machine is inlined, so that each handle method
    /// compiles to one function in which the key's form (borrowed or owned) is known: through a
    /// closure and out-of-line calls, the same add of a queued key costs twice as much
    /// (`benches/RESULTS.md`, the `hotkeys` workload).
    #[inline(always)]
    pub(crate) fn add(self: &Arc<Self>, key: Cow<'_, K>, p: P) -> Result<(), ShutDownError<K>> {
        let mut wake = Wake::default();
        let mut state = self.lock();
        let r = self.add_locked(&mut state, key, p, &mut wake);
        self.keep_metrics_task(&mut state);
        let streams = state.streams_waiting > 0;
        drop(state);
        self.wake(wake, streams);
        r
    }

    /// Starts the gauge refresh loop at an add if the queue has metrics and the loop does not
    /// run (it ends with its runtime, and restarts in the next one that adds).
    #[inline(always)]
    fn keep_metrics_task(self: &Arc<Self>, state: &mut State<K, P>) {
        if state.recorder.is_enabled() && state.metrics_task.running().is_none() {
            self.start_metrics_task(state);
        }
    }

    /// Adds `keys` now, in order, under one hold of the lock (see `WorkQueue::add_all`).
    pub(crate) fn add_all(
        self: &Arc<Self>,
        keys: Vec<K>,
        p: P,
    ) -> Result<(), ShutDownError<Vec<K>>> {
        self.with_lock(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(ShutDownError(keys));
            }
            let mut refused = Vec::new();
            for key in keys {
                if let Err(ShutDownError(key)) = self.add_locked(state, Cow::Owned(key), p, wake) {
                    refused.push(key);
                }
            }
            self.keep_metrics_task(state);
            if refused.is_empty() {
                Ok(())
            } else {
                Err(ShutDownError(refused))
            }
        })
    }

    /// Adds `key` once `delay` has passed (see `WorkQueue::add_after`).
    pub(crate) fn add_after(
        self: &Arc<Self>,
        key: K,
        p: P,
        delay: Duration,
    ) -> Result<(), ShutDownError<K>> {
        let key = self.with_lock(|state, wake| {
            if state.machine.is_shut_down() {
                return Err(Some(ShutDownError(key)));
            }
            if !delay.is_zero() || <P::Machine<K> as Machine<K>>::ZERO_DELAY_IS_RETRY {
                state.recorder.retry();
            }
            self.keep_metrics_task(state);
            if delay.is_zero() || state.machine.absorbs_delayed(&key) {
                return match self.add_locked(state, Cow::Owned(key), p, wake) {
                    Ok(()) => Err(None),
                    Err(e) => Err(Some(e)),
                };
            }
            Ok(key)
        });
        match key {
            Ok(key) => self.wait(key, p, delay.min(MAX_DELAY)),
            Err(None) => Ok(()),
            Err(Some(e)) => Err(e),
        }
    }

    /// Adds `key` after the rate limiter's delay for it.
    pub(crate) fn add_rate_limited(self: &Arc<Self>, key: K, p: P) -> Result<(), ShutDownError<K>> {
        if self.is_shutting_down() {
            return Err(ShutDownError(key));
        }
        let delay = self.rate_limit_delay(&key);
        self.add_after(key, p, delay)
    }

    /// Charges the rate limiter for `key` and returns its delay. The limiter reads tokio's
    /// clock: from a plain thread, the queue's runtime clock.
    pub(crate) fn rate_limit_delay(&self, key: &K) -> Duration {
        self.clock.in_runtime(|| self.limiter.when(key))
    }

    /// Adds `key` now, under the lock; a wait of the key ends (its payload is kept if higher).
    #[inline(always)]
    fn add_locked(
        &self,
        state: &mut State<K, P>,
        key: Cow<'_, K>,
        mut p: P,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            let mut timers = self.lock_timers();
            // With the delay task gone, its timers are stale (they are set again when it
            // restarts): only the wait is ended.
            let runtime = timers.delay_task.running().cloned();
            let _runtime = runtime.as_ref().map(Handle::enter);
            if let Some(waiting) = timers.timers.cancel(&key, runtime.is_some()) {
                p = p.max(waiting);
                self.count_waiting(&timers);
            }
        }
        self.add_now_locked(state, key, p, wake)
    }

    /// Adds `key` now, under the lock, when it does not wait (the delay task's adds).
    #[inline(always)]
    fn add_now_locked(
        &self,
        state: &mut State<K, P>,
        key: Cow<'_, K>,
        p: P,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        // The recorder needs the key after the machine took it: clone only when metrics are on.
        let metric_key = state.recorder.is_enabled().then(|| (*key).clone());
        let now = self.now_nanos();
        let added = match key {
            Cow::Owned(key) => state.machine.add(key, p, now),
            Cow::Borrowed(key) => state.machine.add_ref(key, p, now),
        };
        let priority = <P::Machine<K> as Machine<K>>::metric_priority(p);
        match added {
            Added::Queued => {
                if let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                wake.getters += 1;
                Ok(())
            }
            Added::Raised { from } => {
                if let Some(to) = priority {
                    state.recorder.reprioritize(from, to);
                }
                Ok(())
            }
            Added::Deferred { newly_dirty } => {
                // Dirty while processing: counted by depth and adds, as the original.
                if newly_dirty && let Some(k) = &metric_key {
                    state.recorder.add_at_priority(k, priority, &self.clock);
                }
                Ok(())
            }
            Added::Coalesced => Ok(()),
            Added::Refused(key) => Err(ShutDownError(key)),
        }
    }

    /// Makes `key` wait `delay`, starting the delay task if it does not run. With no runtime
    /// to time the wait, the key is added now rather than lost. Takes the timers' lock only.
    fn wait(self: &Arc<Self>, key: K, p: P, delay: Duration) -> Result<(), ShutDownError<K>> {
        let key = {
            let mut timers = self.lock_timers();
            if timers.shut_down {
                return Err(ShutDownError(key));
            }
            if timers.delay_task.running().is_none() && !self.start_delay_task(&mut timers) {
                debug!(queue = %self.name, "delayed add with no live tokio runtime; adding now");
                key
            } else if let Some(runtime) = timers.delay_task.running().cloned() {
                // The timer's `Sleep` binds to the runtime in context, and the deadline is read
                // by its clock (paused, in tests), whatever thread this add comes from.
                let _runtime = runtime.enter();
                timers.timers.wait_until(key, p, Instant::now() + delay);
                self.count_waiting(&timers);
                return Ok(());
            } else {
                // Its runtime shut down just now: add now rather than lose the key.
                key
            }
        };
        self.with_lock(|state, wake| self.add_now_locked(state, Cow::Owned(key), p, wake))
    }

    /// Adds every waiting key whose deadline is at or before now (test helper).
    #[cfg(feature = "test-util")]
    pub(crate) fn settle(&self) {
        let due = {
            let mut timers = self.lock_timers();
            let Some(runtime) = timers.delay_task.running().cloned() else {
                return;
            };
            let _runtime = runtime.enter();
            let due = timers.timers.take_due(Instant::now());
            self.count_waiting(&timers);
            due
        };
        self.add_due(due);
    }

    // ----- gets and dones -----

    /// Hands out the next key, `Empty` to wait, or `ShutDown` once shut down and empty.
    fn try_pop(&self, state: &mut State<K, P>) -> PopOutcome<(K, P)> {
        let out = state.machine.pop();
        if let PopOutcome::Item((key, p)) = &out {
            let priority = <P::Machine<K> as Machine<K>>::metric_priority(*p);
            state.recorder.get_at_priority(key, priority, &self.clock);
        }
        out
    }

    /// Ends the hand-out of `key` held by an item: called by that item only (its drop or a
    /// consuming method), once, so it ends that hand-out and no later one. Queued again now if
    /// the key was added while processing.
    pub(crate) fn done_item(&self, key: &K) {
        self.with_lock(|state, wake| self.finish_locked(state, key, wake));
    }

    /// The handles' `done`: ends the hand-out of `key` if it was taken out of its item with
    /// `into_key` and not done since. Ignored otherwise: a key not processing, already done, or
    /// held by an item (whose own drop ends it).
    pub(crate) fn done(&self, key: &K) {
        self.with_lock(|state, wake| {
            if state.detached.remove(key) {
                self.finish_locked(state, key, wake);
            } else {
                debug!(queue = %self.name, "done for a key not taken out of its item; ignored");
            }
        });
    }

    /// `key`'s item gave up its hand-out (`into_key`): the handles' `done` ends it now.
    pub(crate) fn detach(&self, key: &K) {
        self.lock().detached.insert(key.clone());
    }

    fn finish_locked(&self, state: &mut State<K, P>, key: &K, wake: &mut Wake) {
        state.recorder.done(key, &self.clock);
        let now = self.now_nanos();
        if let DoneWith::Requeued = state.machine.done(key, now) {
            // Counted by the metrics when it became dirty, not again here (as the original).
            wake.getters += 1;
        }
        wake.idle = state.draining && state.machine.is_idle();
    }

    /// A worker panicked holding `key` in an item: adds it back rate limited (a failure), then
    /// ends the item's hand-out. After shutdown the add is refused and the hand-out only ended.
    pub(crate) fn requeue_after_panic(self: &Arc<Self>, key: K, p: P) {
        debug!(queue = %self.name, "a worker panicked holding a key; requeued rate limited");
        let _ = self.add_rate_limited(key.clone(), p);
        self.done_item(&key);
    }

    // ----- the rest of the handle API -----

    pub(crate) fn forget(&self, key: &K) {
        self.limiter.forget(key);
    }

    pub(crate) fn num_requeues(&self, key: &K) -> usize {
        self.limiter.num_requeues(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().machine.len()
    }

    pub(crate) fn processing_len(&self) -> usize {
        self.lock().machine.processing_len()
    }

    pub(crate) fn waiting_len(&self) -> usize {
        self.lock_timers().timers.len()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Shuts down: adds refused, waiting keys and their timers dropped, background tasks
    /// stopped, every waiting `get` and stream woken. With `drain`, a drain starts.
    pub(crate) fn shut_down(&self, drain: bool) {
        let first = {
            let mut state = self.lock();
            let first = state.machine.shut_down();
            self.shutting_down.store(true, Ordering::Release);
            // Waiting keys are never added now: drop them, their timers and the tasks.
            {
                let mut timers = self.lock_timers();
                timers.shut_down = true;
                timers.timers.clear();
                timers.delay_task.stop();
                self.count_waiting(&timers);
            }
            state.metrics_task.stop();
            state.draining = drain;
            first
        };
        if first {
            debug!(queue = %self.name, drain, "shutting down");
        }
        self.get_wake.notify_waiters();
        self.stream_wake.notify_waiters();
        if !drain {
            // A forced shutdown cuts a drain short.
            self.idle_wake.notify_waiters();
        }
    }

    /// Waits until a drain is over: idle, or cut short by a forced shutdown.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let idle = self.idle_wake.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let state = self.lock();
                if state.machine.is_idle() || !state.draining {
                    return;
                }
            }
            idle.await;
        }
    }

    pub(crate) fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        let state = self.lock();
        let waiting = self.lock_timers().timers.len();
        f.debug_struct(kind)
            .field("name", &self.name)
            .field("len", &state.machine.len())
            .field("processing", &state.machine.processing_len())
            .field("waiting", &waiting)
            .field("streams_waiting", &state.streams_waiting)
            .field("shutting_down", &state.machine.is_shut_down())
            .finish()
    }
}

/// `get`: one waiting `get` per queued key is woken.
impl<K: QueueKey + 'static, P: Payload> Source for Shared<K, P> {
    type Output = Option<(K, P)>;

    fn notify(&self) -> &Notify {
        &self.get_wake
    }

    fn try_take(&self) -> Option<Option<(K, P)>> {
        match self.try_pop(&mut self.lock()) {
            PopOutcome::Item(out) => Some(Some(out)),
            PopOutcome::ShutDown => Some(None),
            PopOutcome::Empty => None,
        }
    }
}
