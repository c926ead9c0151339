//! [`Handle`], the state behind a [`WorkQueue`](crate::WorkQueue) or a
//! [`PriorityQueue`](crate::PriorityQueue): one generic handle over its state machine
//! ([`Core`]), which the two public queues wrap.
//!
//! One lock (parking_lot, never held across an `.await`), `state`, guards everything that
//! changes: the state machine, the metrics recorder, the waiting keys with their timers, and
//! the timer task. Three `Notify`s carry the wake-ups, sent once the lock is released:
//! `get_wake` (one waiting `get` per queued key), `stream_wake` (every waiting stream) and
//! `idle_wake` (drains). The protocol is in the crate's design docs.
//!
//! One file per behaviour: `core` (the state machines, as the handle drives them), `add` (adds
//! now and later), `handout` (gets, dones, shutdown and its drain), `timer_task` (the waiting
//! keys, and the one task that adds them at their deadlines and refreshes the gauges).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use ctrlq_ratelimit::RateLimiter;
use hashbrown::HashSet;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::{Instant, Interval};

use crate::clock::QueueClock;
use crate::metrics::{MetricsProvider, Recorder};
use crate::task::BackgroundTask;

mod add;
mod core;
mod handout;
mod timer_task;

pub(crate) use self::core::{Core, QueueKey};
pub(crate) use self::handout::StreamWait;
use self::timer_task::Timers;

/// The builder options every queue has.
pub(crate) struct Options<K> {
    pub(crate) name: String,
    pub(crate) metrics: Option<Arc<dyn MetricsProvider>>,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
    /// Nanoseconds per priority step; the priority queue's only.
    pub(crate) aging: Option<u64>,
}

impl<K> Default for Options<K> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics: None,
            limiter: None,
            aging: None,
        }
    }
}

impl<K> fmt::Debug for Options<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Options");
        d.field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some());
        if let Some(aging) = self.aging {
            d.field("aging", &std::time::Duration::from_nanos(aging));
        }
        d.finish()
    }
}

/// The state behind a queue handle, over the state machine `M`. See the module docs.
pub(crate) struct Handle<K: QueueKey, M> {
    /// This handle, for the timer task (which holds it weakly) and the items.
    me: Weak<Self>,
    name: String,
    /// The queue's one lock: every add, get and done takes it.
    state: Mutex<State<K, M>>,
    /// Woken once per key queued: one waiting `get` takes it.
    get_wake: Notify,
    /// Woken for every key queued while a stream waits: every waiting stream looks.
    stream_wake: Notify,
    /// Woken when a drain may be over.
    idle_wake: Notify,
    /// Streams waiting for a key (each registered in `stream_wake`).
    streams_waiting: AtomicUsize,
    limiter: Arc<dyn RateLimiter<K>>,
    /// Set once the state machine refuses adds.
    shutting_down: AtomicBool,
    /// A drain is under way (`shut_down_with_drain`).
    draining: AtomicBool,
    /// Read for priority aging, the metrics and deadlines, so that calls from any thread share
    /// the runtime's clock.
    clock: QueueClock,
    origin: Instant,
}

/// Guarded by [`Handle::state`].
struct State<K: QueueKey, M> {
    machine: M,
    recorder: Recorder<K>,
    /// Keys handed out and taken out of their item with `into_key`: the only hand-outs the
    /// handle's `done` ends. Every other hand-out is ended by its item alone, so a `done` never
    /// ends a later hand-out of the same key.
    detached: HashSet<K>,
    /// The keys waiting for a deadline, and their timers.
    timers: Timers<K>,
    /// Adds the waiting keys at their deadlines and ticks `refresh`: started by the first
    /// delayed add, or with metrics by the first add.
    task: BackgroundTask,
    /// With metrics, when the timer task refreshes the unfinished-work gauges.
    refresh: Option<Interval>,
    /// The runtime dropped the timer task: no key waits any more (a delayed add is added at
    /// once), and no task starts again, since the queue is bound to that runtime.
    runtime_gone: bool,
}

/// What to wake once the lock is released.
#[derive(Default)]
#[must_use]
struct Wake {
    getters: usize,
    idle: bool,
}

impl<K: QueueKey + 'static, M: Core<K>> Handle<K, M> {
    pub(crate) fn new(options: Options<K>) -> Arc<Self> {
        let Options {
            name,
            metrics,
            limiter,
            aging,
        } = options;
        let recorder = Recorder::new(&name, metrics);
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        Arc::new_cyclic(|me| Handle {
            me: me.clone(),
            name,
            state: Mutex::new(State {
                machine: M::new(aging),
                recorder,
                detached: HashSet::new(),
                timers: Timers::new(M::TIES_BY_ADD_COUNTER),
                task: BackgroundTask::default(),
                refresh: None,
                runtime_gone: false,
            }),
            get_wake: Notify::new(),
            stream_wake: Notify::new(),
            idle_wake: Notify::new(),
            streams_waiting: AtomicUsize::new(0),
            limiter,
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            origin: clock.now(),
            clock,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<K, M>> {
        // parking_lot's lock does not poison; every transition completes or changes nothing
        // before a user's Hash/Eq could panic under it.
        crate::count::lock(&self.state)
    }

    /// The machine's clock: nanoseconds since the queue was built, read only by a machine
    /// that ages its keys.
    fn now_nanos(&self) -> u64 {
        if M::NEEDS_TIME {
            let since = self.clock.now().saturating_duration_since(self.origin);
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        }
    }

    /// Wakes what a locked step asked for; call after releasing the lock.
    #[inline]
    fn wake(&self, wake: Wake) {
        for _ in 0..wake.getters {
            crate::count::wake();
            self.get_wake.notify_one();
        }
        if wake.getters > 0 && self.streams_waiting.load(Ordering::SeqCst) > 0 {
            crate::count::wake();
            self.stream_wake.notify_waiters();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Runs `f` under the lock, then wakes what it asked for.
    #[inline(always)]
    fn with_lock<R>(&self, f: impl FnOnce(&mut State<K, M>, &mut Wake) -> R) -> R {
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
        self.lock().timers.len()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// The queue's `Debug`: its state, not its internals.
    pub(crate) fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        let waiting = self.waiting_len();
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
