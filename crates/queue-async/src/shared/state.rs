//! [`Shared`], the state behind a handle: its shards and their locks, the hand-out order across
//! shards, the wake-ups sent once a lock is released; the read-only queries of the handle API.

use std::collections::VecDeque;
use std::fmt;
use std::hash::BuildHasher;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use ctrlq_ratelimit::RateLimiter;
use hashbrown::{DefaultHashBuilder, HashSet};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::machine::{Machine, Payload, QueueKey};
use super::timers::Timers;
use crate::clock::QueueClock;
use crate::metrics::{Handles, MetricsProvider, Recorder};
use crate::task::BackgroundTask;

/// The most shards a queue splits into.
pub(crate) const MAX_SHARDS: usize = 1024;

/// The builder options every queue has.
pub(crate) struct Options<K> {
    pub(crate) name: String,
    pub(crate) metrics: Option<Arc<dyn MetricsProvider>>,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
    /// Shards of a work queue; `None`: from the runtime's worker threads.
    pub(crate) shards: Option<usize>,
}

impl<K> Default for Options<K> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics: None,
            limiter: None,
            shards: None,
        }
    }
}

impl<K> fmt::Debug for Options<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some())
            .field("shards", &self.shards)
            .finish()
    }
}

/// Keeps what it holds on cache lines of its own, so that a lock taken on one core does not
/// move a neighbour's lock or counter away from another core (128 bytes: two 64-byte lines,
/// which x86-64's adjacent-line prefetch pulls in pairs).
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The state behind a [`WorkQueue`](crate::WorkQueue) (`P = ()`) or a
/// [`PriorityQueue`](crate::PriorityQueue) (`P = i32`). See the module docs of `shared`.
pub(crate) struct Shared<K: QueueKey, P: Payload> {
    pub(super) name: String,
    /// The shards: a key always lives in the shard its hash picks. One for a priority queue.
    pub(super) shards: Box<[Shard<K, P>]>,
    /// With more than one shard: the shard of every queued key, in the order the keys were
    /// queued. Taken after a shard's lock when both are held.
    pub(super) order: Padded<Mutex<VecDeque<u32>>>,
    /// Picks a key's shard (seeded apart from the state machines' own tables).
    pub(super) hasher: DefaultHashBuilder,
    /// Shards with keys queued or processing: the queue is idle at 0.
    pub(super) busy: Padded<AtomicUsize>,
    /// Taken after a shard's lock when both are held.
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
    /// Set once every shard refuses adds.
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

/// One shard's lock, on cache lines of its own.
pub(super) type Shard<K, P> = Padded<Mutex<State<K, P>>>;

/// One shard, guarded by its lock in [`Shared::shards`].
pub(super) struct State<K: QueueKey, P: Payload> {
    pub(super) machine: P::Machine<K>,
    pub(super) recorder: Recorder<K>,
    /// Counted in [`Shared::busy`].
    pub(super) busy: bool,
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
    /// The shard `key` lives in.
    #[inline]
    pub(super) fn shard_of(&self, key: &K) -> usize {
        let n = self.shards.len();
        if n == 1 {
            return 0;
        }
        // `n` is a power of two: the hash's top bits pick the shard.
        let bits = n.trailing_zeros();
        (self.hasher.hash_one(key) >> (u64::BITS - bits)) as usize
    }

    pub(super) fn lock(&self, shard: usize) -> MutexGuard<'_, State<K, P>> {
        // parking_lot's lock does not poison; every transition completes or changes nothing
        // before a user's Hash/Eq could panic under it.
        self.shards[shard].lock()
    }

    pub(super) fn lock_timers(&self) -> MutexGuard<'_, TimerState<K, P>> {
        self.timers.lock()
    }

    /// Publishes how many keys wait; call before releasing the timers' lock after a change.
    pub(super) fn count_waiting(&self, timers: &TimerState<K, P>) {
        self.waiting.store(timers.timers.len(), Ordering::Release);
    }

    /// Counts the shard in or out of [`busy`](Self::busy) after a transition; a drain is
    /// woken when the last busy shard turns idle.
    #[inline]
    pub(super) fn note_busy(&self, state: &mut State<K, P>, wake: &mut Wake) {
        let busy = !state.machine.is_idle();
        if busy == state.busy {
            return;
        }
        state.busy = busy;
        if busy {
            self.busy.fetch_add(1, Ordering::SeqCst);
        } else if self.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
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
            shards,
        } = options;
        let shards = if P::SHARDED {
            shards.unwrap_or_else(default_shards)
        } else {
            1
        };
        let shards = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        // Asked of the provider once for the whole queue: every shard reports into this set.
        let handles = metrics.and_then(|provider| Handles::new(&name, provider));
        let has_metrics = handles.is_some();
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        let shards = (0..shards)
            .map(|_| {
                Padded(Mutex::new(State {
                    machine: <P::Machine<K> as Machine<K>>::new(aging),
                    recorder: Recorder::shared(handles.as_ref()),
                    busy: false,
                    detached: HashSet::new(),
                }))
            })
            .collect();
        Arc::new(Shared {
            name,
            shards,
            order: Padded(Mutex::new(VecDeque::new())),
            hasher: DefaultHashBuilder::default(),
            busy: Padded(AtomicUsize::new(0)),
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

    /// Runs `f` under the lock of `shard`, then wakes what it asked for.
    pub(super) fn with_lock<R>(
        &self,
        shard: usize,
        f: impl FnOnce(&mut State<K, P>, &mut Wake) -> R,
    ) -> R {
        let mut wake = Wake::default();
        let r = f(&mut self.lock(shard), &mut wake);
        self.wake(wake);
        r
    }

    pub(crate) fn forget(&self, key: &K) {
        self.limiter.forget(key);
    }

    pub(crate) fn num_requeues(&self, key: &K) -> usize {
        self.limiter.num_requeues(key)
    }

    /// Sums `f` over the shards, each read under its lock.
    fn sum(&self, f: impl Fn(&State<K, P>) -> usize) -> usize {
        (0..self.shards.len()).map(|i| f(&self.lock(i))).sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.sum(|s| s.machine.len())
    }

    pub(crate) fn processing_len(&self) -> usize {
        self.sum(|s| s.machine.processing_len())
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
            .field("shards", &self.shards.len())
            .field(
                "streams_waiting",
                &self.streams_waiting.load(Ordering::Relaxed),
            )
            .field("shutting_down", &self.is_shutting_down())
            .finish()
    }
}

/// A work queue's shards when its builder names none: one on a runtime of one or two worker
/// threads (no lock is contended enough to pay for the hand-out order), else four per worker
/// thread, so that two workers rarely meet on one shard. Outside a runtime, the threads this
/// process may run on stand for the workers.
fn default_shards() -> usize {
    let threads = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.metrics().num_workers(),
        Err(_) => std::thread::available_parallelism().map_or(1, usize::from),
    };
    if threads <= 2 { 1 } else { threads * 4 }
}
