//! [`Shared`], the state behind a handle: its lock, the wake-ups sent once the lock is
//! released; the read-only queries of the handle API.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ctrlq_ratelimit::RateLimiter;
use hashbrown::HashSet;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::machine::{Machine, Payload, QueueKey};
use super::timers::Timers;
use crate::clock::QueueClock;
use crate::metrics::{Handles, MetricsProvider, Recorder};
use crate::task::BackgroundTask;

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
/// [`PriorityQueue`](crate::PriorityQueue) (`P = i32`). See the module docs of `shared`.
pub(crate) struct Shared<K: QueueKey, P: Payload> {
    pub(super) name: String,
    /// The state machine and what goes with it: every add, get and done takes this lock.
    pub(super) state: Mutex<State<K, P>>,
    /// Taken after `state` when both are held.
    pub(super) timers: Mutex<TimerState<K, P>>,
    /// How many keys wait (mirrors `timers`), so that an add skips the timers' lock when none
    /// does.
    pub(super) waiting: AtomicUsize,
    /// Woken once per key queued: one waiting `get` takes it.
    pub(super) get_wake: Notify,
    /// Woken for every key queued while a stream waits: every waiting stream looks.
    pub(super) stream_wake: Notify,
    /// Woken when a drain may be over.
    pub(super) idle_wake: Notify,
    /// Streams waiting for a key (each registered in `stream_wake`).
    pub(super) streams_waiting: AtomicUsize,
    pub(super) limiter: Arc<dyn RateLimiter<K>>,
    /// Set once the state machine refuses adds.
    pub(super) shutting_down: AtomicBool,
    /// A drain is under way (`shut_down_with_drain`).
    pub(super) draining: AtomicBool,
    /// Whether the queue reports metrics.
    pub(super) metrics: bool,
    /// Refreshes the unfinished-work gauges; with how many times it was started.
    pub(super) metrics_task: Mutex<(BackgroundTask, u64)>,
    /// Which start of the metrics task runs (0: none), read by adds without its lock.
    pub(super) metrics_live: Arc<AtomicU64>,
    /// Keys handed out and not done, counted only with metrics (to zero their gauges).
    pub(super) in_progress: AtomicUsize,
    /// Read for priority aging, the metrics and deadlines, so that calls from any thread share
    /// the runtime's clock.
    pub(super) clock: QueueClock,
    pub(super) origin: Instant,
}

/// Guarded by [`Shared::state`].
pub(super) struct State<K: QueueKey, P: Payload> {
    pub(super) machine: P::Machine<K>,
    pub(super) recorder: Recorder<K>,
    /// Keys handed out and taken out of their item with `into_key`: the only hand-outs the
    /// handle's `done` ends. Every other hand-out is ended by its item alone, so a `done` never
    /// ends a later hand-out of the same key.
    pub(super) detached: HashSet<K>,
}

/// Guarded by [`Shared::timers`].
pub(super) struct TimerState<K: QueueKey, P: Payload> {
    pub(super) timers: Timers<K, P>,
    /// Polls `timers` and adds the keys that are due.
    pub(super) delay_task: BackgroundTask,
    /// Set by the queue's shutdown: no key waits after it.
    pub(super) shut_down: bool,
    /// Set when the runtime dropped the delay task: no key waits after it either (it is added
    /// at once), since the queue is bound to that runtime.
    pub(super) runtime_gone: bool,
}

/// What to wake once the lock is released.
#[derive(Default)]
#[must_use]
pub(super) struct Wake {
    pub(super) getters: usize,
    pub(super) idle: bool,
}

impl<K: QueueKey, P: Payload> Shared<K, P> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<K, P>> {
        // parking_lot's lock does not poison; every transition completes or changes nothing
        // before a user's Hash/Eq could panic under it.
        self.state.lock()
    }

    pub(super) fn lock_timers(&self) -> MutexGuard<'_, TimerState<K, P>> {
        self.timers.lock()
    }

    /// Publishes how many keys wait; call before releasing the timers' lock after a change.
    pub(super) fn count_waiting(&self, timers: &TimerState<K, P>) {
        self.waiting.store(timers.timers.len(), Ordering::Release);
    }

    /// After a transition that may end the last hand-out: a drain is woken if the queue is
    /// idle.
    pub(super) fn note_idle(&self, state: &State<K, P>, wake: &mut Wake) {
        if state.machine.is_idle() {
            wake.idle = self.draining.load(Ordering::SeqCst);
        }
    }
}

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    pub(crate) fn new(aging: Option<u64>, options: Options<K>) -> Arc<Self> {
        let Options {
            name,
            metrics,
            limiter,
        } = options;
        let handles = metrics.and_then(|provider| Handles::new(&name, provider));
        let has_metrics = handles.is_some();
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        Arc::new(Shared {
            name,
            state: Mutex::new(State {
                machine: <P::Machine<K> as Machine<K>>::new(aging),
                recorder: Recorder::shared(handles.as_ref()),
                detached: HashSet::new(),
            }),
            timers: Mutex::new(TimerState {
                timers: Timers::new(),
                delay_task: BackgroundTask::default(),
                shut_down: false,
                runtime_gone: false,
            }),
            waiting: AtomicUsize::new(0),
            get_wake: Notify::new(),
            stream_wake: Notify::new(),
            idle_wake: Notify::new(),
            streams_waiting: AtomicUsize::new(0),
            limiter,
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            metrics: has_metrics,
            metrics_task: Mutex::new((BackgroundTask::default(), 0)),
            metrics_live: Arc::new(AtomicU64::new(0)),
            in_progress: AtomicUsize::new(0),
            origin: clock.now(),
            clock,
        })
    }

    pub(super) fn now_nanos(&self) -> u64 {
        if <P::Machine<K> as Machine<K>>::NEEDS_TIME {
            let since = self.clock.now().saturating_duration_since(self.origin);
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        }
    }

    #[inline]
    pub(super) fn wake(&self, wake: Wake) {
        for _ in 0..wake.getters {
            self.get_wake.notify_one();
        }
        if wake.getters > 0 && self.streams_waiting.load(Ordering::SeqCst) > 0 {
            self.stream_wake.notify_waiters();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Runs `f` under the lock, then wakes what it asked for.
    pub(super) fn with_lock<R>(&self, f: impl FnOnce(&mut State<K, P>, &mut Wake) -> R) -> R {
        let mut wake = Wake::default();
        let r = f(&mut self.lock(), &mut wake);
        self.wake(wake);
        r
    }

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

    pub(crate) fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        let waiting = self.lock_timers().timers.len();
        f.debug_struct(kind)
            .field("name", &self.name)
            .field("len", &self.len())
            .field("processing", &self.processing_len())
            .field("waiting", &waiting)
            .field(
                "streams_waiting",
                &self.streams_waiting.load(Ordering::Relaxed),
            )
            .field("shutting_down", &self.is_shutting_down())
            .finish()
    }
}
