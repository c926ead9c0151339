//! The machinery both work queues share: the lock around a state machine (FIFO or priority),
//! the waiting map with its timers and the delay task that drives them, the rate limiter, the
//! metrics recorder and its ticker, and the wake-ups of `get` and of drains.
//!
//! [`WorkQueue`](crate::WorkQueue) and [`PriorityQueue`](crate::PriorityQueue) are thin handles
//! over an `Arc<dyn Backend<K, P>>`, `P` being `()` or the priority.

pub(crate) mod delay;
pub(crate) mod handle;

use std::borrow::Cow;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Context;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use queue_core::{
    AddOutcome, DoneOutcome, KeyHash, KeyHasher, PopOutcome, PriorityAdd, PriorityDone,
    PriorityState, WorkState,
};
use ratelimit::RateLimiter;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use self::delay::{Timers, WaitingMap, disarm};

use crate::ShutDownError;
use crate::clock::QueueClock;
use crate::metrics::{Recorder, UNFINISHED_WORK_UPDATE_PERIOD};

/// The longest delay honoured by delayed adds; longer delays are clamped to it (365 days).
///
/// tokio-util's `DelayQueue` panics about two years out; a year is far beyond any useful retry.
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// What an add did, for both state machines.
pub(crate) enum Added<K> {
    Queued,
    Raised { from: i32 },
    Coalesced,
    Deferred { newly_dirty: bool },
    Refused(K),
}

impl<K> From<AddOutcome<K>> for Added<K> {
    fn from(outcome: AddOutcome<K>) -> Self {
        match outcome {
            AddOutcome::Queued => Added::Queued,
            AddOutcome::Coalesced => Added::Coalesced,
            AddOutcome::Deferred => Added::Deferred { newly_dirty: true },
            AddOutcome::Refused(k) => Added::Refused(k),
        }
    }
}

impl<K> From<PriorityAdd<K>> for Added<K> {
    fn from(outcome: PriorityAdd<K>) -> Self {
        match outcome {
            PriorityAdd::Queued => Added::Queued,
            PriorityAdd::Raised { from } => Added::Raised { from },
            PriorityAdd::Coalesced => Added::Coalesced,
            PriorityAdd::Deferred { newly_dirty } => Added::Deferred { newly_dirty },
            PriorityAdd::Refused(k) => Added::Refused(k),
        }
    }
}

/// What a done did.
pub(crate) enum DoneWith<P> {
    Finished,
    Requeued(P),
    NotProcessing,
}

/// A queue's state machine: `P` is what an add carries besides the key (`()` or a priority).
pub(crate) trait Machine<K>: Send + 'static {
    type P: Copy + Ord + Send + Sync + fmt::Debug + 'static;
    /// Whether `now` must be read for adds and dones (priority aging).
    const NEEDS_TIME: bool;
    /// The hasher of the machine's key tables, if it takes keys hashed before the lock is
    /// taken (the `hash` arguments below; with `None` the machine hashes under the lock).
    fn key_hasher(&self) -> Option<KeyHasher>;
    fn add(&mut self, key: K, hash: Option<KeyHash>, p: Self::P, now: u64) -> Added<K>;
    /// [`add`](Machine::add) by reference, cloning the key only if the machine keeps it.
    fn add_ref(&mut self, key: &K, hash: Option<KeyHash>, p: Self::P, now: u64) -> Added<K>;
    fn pop(&mut self) -> PopOutcome<(K, Self::P)>;
    fn done(&mut self, key: &K, hash: Option<KeyHash>, now: u64) -> DoneWith<Self::P>;
    fn shut_down(&mut self) -> bool;
    fn is_shut_down(&self) -> bool;
    fn len(&self) -> usize;
    fn processing_len(&self) -> usize;
    fn is_idle(&self) -> bool;
    /// Whether a delayed add of `key` is absorbed because the key is ready now (the priority
    /// queue's rule; the plain work queue always schedules, as client-go's delaying queue).
    fn absorbs_delayed(&self, key: &K) -> bool;
    /// The priority label of the depth metric, if the queue has priorities.
    fn metric_priority(p: Self::P) -> Option<i32>;
}

impl<K: Hash + Eq + Clone + Send + 'static> Machine<K> for WorkState<K> {
    type P = ();
    const NEEDS_TIME: bool = false;
    fn key_hasher(&self) -> Option<KeyHasher> {
        Some(WorkState::key_hasher(self))
    }
    fn add(&mut self, key: K, hash: Option<KeyHash>, (): (), _now: u64) -> Added<K> {
        match hash {
            Some(hash) => WorkState::add_hashed(self, hash, key),
            None => WorkState::add(self, key),
        }
        .into()
    }
    fn add_ref(&mut self, key: &K, hash: Option<KeyHash>, (): (), _now: u64) -> Added<K> {
        match hash {
            Some(hash) => WorkState::add_ref_hashed(self, hash, key),
            None => WorkState::add_ref(self, key),
        }
        .into()
    }
    fn pop(&mut self) -> PopOutcome<(K, ())> {
        match WorkState::pop(self) {
            PopOutcome::Item(k) => PopOutcome::Item((k, ())),
            PopOutcome::Empty => PopOutcome::Empty,
            PopOutcome::ShutDown => PopOutcome::ShutDown,
        }
    }
    fn done(&mut self, key: &K, hash: Option<KeyHash>, _now: u64) -> DoneWith<()> {
        let outcome = match hash {
            Some(hash) => WorkState::done_hashed(self, hash, key),
            None => WorkState::done(self, key),
        };
        match outcome {
            DoneOutcome::Finished => DoneWith::Finished,
            DoneOutcome::Requeued => DoneWith::Requeued(()),
            DoneOutcome::NotProcessing => DoneWith::NotProcessing,
        }
    }
    fn shut_down(&mut self) -> bool {
        WorkState::shut_down(self)
    }
    fn is_shut_down(&self) -> bool {
        WorkState::is_shut_down(self)
    }
    fn len(&self) -> usize {
        WorkState::len(self)
    }
    fn processing_len(&self) -> usize {
        WorkState::processing_len(self)
    }
    fn is_idle(&self) -> bool {
        WorkState::is_idle(self)
    }
    fn absorbs_delayed(&self, _key: &K) -> bool {
        false
    }
    fn metric_priority((): ()) -> Option<i32> {
        None
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Machine<K> for PriorityState<K> {
    type P = i32;
    const NEEDS_TIME: bool = true;
    fn key_hasher(&self) -> Option<KeyHasher> {
        None
    }
    fn add(&mut self, key: K, _hash: Option<KeyHash>, p: i32, now: u64) -> Added<K> {
        PriorityState::add(self, key, p, now).into()
    }
    fn add_ref(&mut self, key: &K, _hash: Option<KeyHash>, p: i32, now: u64) -> Added<K> {
        PriorityState::add_ref(self, key, p, now).into()
    }
    fn pop(&mut self) -> PopOutcome<(K, i32)> {
        PriorityState::pop(self)
    }
    fn done(&mut self, key: &K, _hash: Option<KeyHash>, now: u64) -> DoneWith<i32> {
        match PriorityState::done(self, key, now) {
            PriorityDone::Finished => DoneWith::Finished,
            PriorityDone::Requeued(p) => DoneWith::Requeued(p),
            PriorityDone::NotProcessing => DoneWith::NotProcessing,
        }
    }
    fn shut_down(&mut self) -> bool {
        PriorityState::shut_down(self)
    }
    fn is_shut_down(&self) -> bool {
        PriorityState::is_shut_down(self)
    }
    fn len(&self) -> usize {
        PriorityState::len(self)
    }
    fn processing_len(&self) -> usize {
        PriorityState::processing_len(self)
    }
    fn is_idle(&self) -> bool {
        PriorityState::is_idle(self)
    }
    fn absorbs_delayed(&self, key: &K) -> bool {
        self.ready_priority(key).is_some()
    }
    fn metric_priority(p: i32) -> Option<i32> {
        Some(p)
    }
}

/// The operations the handles, guards and futures need, object safe so that the public types
/// do not carry the state machine's type.
pub(crate) trait Backend<K, P>: Send + Sync {
    fn get_wake(&self) -> &Notify;
    /// `Some(Some(..))` a key for a worker, `Some(None)` shut down and empty, `None` wait.
    fn try_get(&self) -> Option<Option<(K, P)>>;
    fn done(&self, key: &K);
    fn add(&self, key: K, p: P) -> Result<(), ShutDownError<K>>;
    fn add_ref(&self, key: &K, p: P) -> Result<(), ShutDownError<K>>;
    fn add_after(self: Arc<Self>, key: K, p: P, delay: Duration) -> Result<(), ShutDownError<K>>;
    fn add_rate_limited(self: Arc<Self>, key: K, p: P) -> Result<(), ShutDownError<K>>;
    fn forget(&self, key: &K);
    /// Charges the rate limiter for `key` and returns its delay.
    fn rate_limit_delay(&self, key: &K) -> Duration;
    fn num_requeues(&self, key: &K) -> usize;
    fn len(&self) -> usize;
    fn processing_len(&self) -> usize;
    fn waiting_len(&self) -> usize;
    fn shut_down(&self, drain: bool);
    fn is_shutting_down(&self) -> bool;
    fn idle_wake(&self) -> &Notify;
    /// Whether a drain is over: idle, or cut short.
    fn drain_over(&self) -> bool;
    /// A receiver that fires once the delay task has added every key due at this instant.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    fn settle(&self) -> Option<oneshot::Receiver<()>>;
    fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result;
}

/// Shared state of one queue (the background tasks hold it weakly).
pub(crate) struct Shared<K, S: Machine<K>> {
    name: String,
    state: Mutex<State<K, S>>,
    get_wake: Notify,
    idle_wake: Notify,
    limiter: Arc<dyn RateLimiter<K>>,
    shut_down_flag: AtomicBool,
    /// Read for priority aging and the metrics, and around the rate limiter, so that calls
    /// from any thread share the runtime's clock.
    clock: QueueClock,
    origin: Instant,
    me: Weak<Self>,
    /// The machine's key hasher, if it takes keys hashed outside the lock: `add` and `done`
    /// hash before locking, so the lock covers the table look-ups only.
    key_hasher: Option<KeyHasher>,
}

struct State<K, S: Machine<K>> {
    machine: S,
    /// Keys waiting for their delay, each with a timer in the delay task's `timers`.
    waiting: WaitingMap<K, S::P>,
    /// Order of delayed adds, to break ties between keys due at the same instant.
    wait_seq: u64,
    /// The delay task and the timers, once a delayed add started them (boxed: the hot state
    /// under the lock stays small).
    delay_task: Option<Box<DelayTask<K>>>,
    recorder: Recorder<K>,
    /// The gauge refresh loop's liveness: closed once its future is dropped (the loop ended, or
    /// its runtime shut down), so a later add in a live runtime starts a new one.
    metrics_task: Option<oneshot::Sender<()>>,
    draining: bool,
}

/// The timers of the waiting keys, the delay task's runtime and its request channel. Dropping
/// this ends the task: the channel closes.
struct DelayTask<K> {
    /// The waiting keys' timers. Delayed adds set them here directly, under the lock (no
    /// hand-off to the task, no second map); only the delay task polls them, so it is the task
    /// that their wake-ups reach.
    timers: Timers<K>,
    /// Timers are set inside this runtime's context, from whatever thread adds.
    runtime: tokio::runtime::Handle,
    /// [`settle`](Backend::settle) requests.
    settle: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

/// What to do after releasing the lock.
#[derive(Default)]
#[must_use]
struct Wake {
    getters: usize,
    idle: bool,
}

impl<K, S> Shared<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    pub(crate) fn new(machine: S, options: handle::Options<K>) -> Arc<Self> {
        let handle::Options {
            name,
            metrics,
            limiter,
        } = options;
        let recorder = match &metrics {
            Some(provider) => Recorder::new(&name, provider.clone()),
            None => Recorder::disabled(),
        };
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        let key_hasher = machine.key_hasher();
        Arc::new_cyclic(|me| Shared {
            key_hasher,
            name,
            state: Mutex::new(State {
                machine,
                waiting: WaitingMap::new(),
                wait_seq: 0,
                delay_task: None,
                recorder,
                metrics_task: None,
                draining: false,
            }),
            get_wake: Notify::new(),
            idle_wake: Notify::new(),
            limiter,
            shut_down_flag: AtomicBool::new(false),
            origin: clock.now(),
            clock,
            me: me.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<K, S>> {
        // parking_lot's lock does not poison; every transition completes or changes nothing
        // before a user's Hash/Eq could panic under it.
        self.state.lock()
    }

    /// `key`'s hash for the machine, made before the lock is taken (`None` if the machine
    /// hashes under the lock).
    fn hash(&self, key: &K) -> Option<KeyHash> {
        self.key_hasher.as_ref().map(|h| h.hash(key))
    }

    fn now_nanos(&self) -> u64 {
        if S::NEEDS_TIME {
            let since = self.clock.now().saturating_duration_since(self.origin);
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        }
    }

    fn wake(&self, wake: Wake) {
        for _ in 0..wake.getters {
            self.get_wake.notify_one();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Adds `key` now; a borrowed key is cloned only if the queue keeps it.
    fn add_now(&self, key: Cow<'_, K>, p: S::P) -> Result<(), ShutDownError<K>> {
        let hash = self.hash(&key);
        let mut wake = Wake::default();
        let result = {
            let mut state = self.lock();
            let r = self.add_locked(&mut state, key, hash, p, &mut wake);
            if state.recorder.is_enabled()
                && state.metrics_task.as_ref().is_none_or(|t| t.is_closed())
                && let Some(me) = self.arc()
            {
                me.ensure_metrics_task(&mut state);
            }
            r
        };
        self.wake(wake);
        result
    }

    /// Adds `key` now, under the lock; a waiting entry for it is void (its priority is kept).
    fn add_locked(
        &self,
        state: &mut State<K, S>,
        key: Cow<'_, K>,
        hash: Option<KeyHash>,
        p: S::P,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        let mut p = p;
        if !state.waiting.is_empty()
            && let Some(waiting) = state.waiting.remove(state.waiting.hash(&key), &key)
        {
            p = p.max(waiting.p);
            if let Some(task) = state.delay_task.as_mut() {
                let _runtime = task.runtime.enter();
                disarm(&mut task.timers, &mut state.waiting, waiting.slot);
            }
        }
        // The recorder needs the key after the machine took it: clone only when metrics are on.
        let metric_key = state.recorder.is_enabled().then(|| (*key).clone());
        let now = self.now_nanos();
        let added = match key {
            Cow::Owned(key) => state.machine.add(key, hash, p, now),
            Cow::Borrowed(key) => state.machine.add_ref(key, hash, p, now),
        };
        match added {
            Added::Queued => {
                if let Some(k) = &metric_key {
                    state
                        .recorder
                        .add_at_priority(k, S::metric_priority(p), &self.clock);
                }
                wake.getters += 1;
                Ok(())
            }
            Added::Raised { from } => {
                if let Some(to) = S::metric_priority(p) {
                    state.recorder.reprioritize(from, to);
                }
                Ok(())
            }
            Added::Deferred { newly_dirty } => {
                // Dirty while processing: counted by depth and adds, as the original.
                if newly_dirty && let Some(k) = &metric_key {
                    state
                        .recorder
                        .add_at_priority(k, S::metric_priority(p), &self.clock);
                }
                Ok(())
            }
            Added::Coalesced => Ok(()),
            Added::Refused(key) => Err(ShutDownError(key)),
        }
    }

    /// Adds every waiting key whose timer rang, under one lock: by deadline, then higher
    /// priority, then the order of their delayed adds, so a batch that became ready together
    /// keeps the priority order (controller-runtime's rule). `cx` is woken at the next timer,
    /// or when an add sets an earlier one.
    pub(crate) fn poll_timers(&self, cx: &mut Context<'_>) {
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            let state = &mut *state;
            let Some(task) = state.delay_task.as_mut() else {
                return;
            };
            let now = Instant::now();
            let delay::Due { due, early } = task.timers.poll_due(cx, now);
            let mut ready: Vec<(Instant, std::cmp::Reverse<S::P>, u64, K)> = Vec::new();
            for (hash, key) in early {
                // Rang before its deadline (see `Timers::poll_due`): time it again.
                if let Some(w) = state.waiting.get_mut(hash, &key)
                    && w.at > now
                {
                    w.slot = task.timers.rearm(hash, key, w.at);
                } else if let Some(w) = state.waiting.remove(hash, &key) {
                    ready.push((w.at, std::cmp::Reverse(w.p), w.seq, key));
                }
            }
            for (hash, key) in due {
                // Every timer belongs to a waiting key: adds now and shutdown remove both.
                if let Some(w) = state.waiting.remove(hash, &key) {
                    ready.push((w.at, std::cmp::Reverse(w.p), w.seq, key));
                }
            }
            for w in delay::take_begun(&mut task.timers, &mut state.waiting, now) {
                ready.push((w.at, std::cmp::Reverse(w.p), w.seq, w.key));
            }
            if ready.is_empty() {
                return;
            }
            ready.sort_unstable_by_key(|r| (r.0, r.1, r.2));
            for (_, std::cmp::Reverse(p), _, key) in ready {
                let _ = self.add_locked(state, Cow::Owned(key), None, p, &mut wake);
            }
            debug!(queue = %self.name, ready = wake.getters, "delays over");
        }
        self.wake(wake);
    }

    /// Aligns the delay timers to tokio's timer grid (see `Timers::align`).
    pub(crate) fn align_timers(&self, grid: Instant, error: Duration) {
        if let Some(task) = self.lock().delay_task.as_mut() {
            task.timers.align(grid, error);
        }
    }

    fn add_after_inner(
        self: &Arc<Self>,
        key: K,
        p: S::P,
        delay: Duration,
    ) -> Result<(), ShutDownError<K>> {
        let mut wake = Wake::default();
        let result = {
            let mut state = self.lock();
            if state.machine.is_shut_down() {
                return Err(ShutDownError(key));
            }
            state.recorder.retry();
            self.ensure_metrics_task(&mut state);
            if delay.is_zero() {
                self.add_locked(&mut state, Cow::Owned(key), None, p, &mut wake)
            } else {
                self.wait_locked(&mut state, key, p, delay.min(MAX_DELAY), &mut wake)
            }
        };
        self.wake(wake);
        result
    }

    /// Records `key` as waiting until now + `delay`, keeping an earlier deadline and the higher
    /// of the two priorities, and sets the delay task's alarm.
    fn wait_locked(
        self: &Arc<Self>,
        state: &mut State<K, S>,
        key: K,
        p: S::P,
        delay: Duration,
        wake: &mut Wake,
    ) -> Result<(), ShutDownError<K>> {
        if state.machine.absorbs_delayed(&key) {
            // Ready already: it stays ready, at the higher of the two priorities.
            return self.add_locked(state, Cow::Owned(key), None, p, wake);
        }
        // The task is gone if its request channel closed while we hold the sender: its runtime
        // was dropped (a queue that outlives the runtime of its first delayed add, such as one
        // shared by several `#[tokio::test]`s). Then a new task takes over every waiting key.
        let task = match &mut state.delay_task {
            Some(task) if !task.settle.is_closed() => task,
            // From a plain thread, the queue's runtime times the key. A runtime that has shut
            // down drops the task at once, closing the channel: then no runtime can time it.
            _ => match self.clock.runtime().and_then(|runtime| {
                let (tx, rx) = mpsc::unbounded_channel();
                runtime.spawn(delay::run(Arc::downgrade(self), rx, self.name.clone()));
                (!tx.is_closed()).then_some((runtime, tx))
            }) {
                Some((runtime, tx)) => {
                    self.clock.set_runtime(&runtime);
                    // The timers' grid and `Sleep`s are that runtime's, whatever thread this is.
                    let timers = {
                        let _runtime = runtime.enter();
                        let mut timers = Timers::new();
                        if !state.waiting.is_empty() {
                            debug!(queue = %self.name, waiting = state.waiting.len(), "delay task restarted");
                            for (hash, w) in state.waiting.iter_mut() {
                                w.slot = timers.arm(hash, w.key.clone(), w.at);
                            }
                        }
                        timers
                    };
                    state.delay_task.insert(Box::new(DelayTask {
                        timers,
                        runtime,
                        settle: tx,
                    }))
                }
                None => {
                    // No runtime to time the delay: add now rather than lose the key.
                    debug!(queue = %self.name, "delayed add outside a tokio runtime; adding now");
                    return self.add_locked(state, Cow::Owned(key), None, p, wake);
                }
            },
        };
        // A timer may need a new `Sleep`, which binds to the runtime in context: make it the
        // delay task's, whatever thread or runtime this add comes from.
        let _runtime = task.runtime.enter();
        // Read the clock inside that runtime too: from a plain thread, `Instant::now()` would
        // read the real clock, not the task's (paused, in tests) one, and the deadline would
        // drift by however long the real thread took.
        let deadline = Instant::now() + delay;
        let hash = state.waiting.hash(&key);
        if let Some(w) = state.waiting.get_mut(hash, &key) {
            w.p = w.p.max(p);
            if w.at <= deadline {
                return Ok(()); // already waiting with an earlier deadline
            }
            // Earlier than the key's deadline: move its timer.
            state.wait_seq += 1;
            (w.at, w.seq) = (deadline, state.wait_seq);
            let old = w.slot;
            w.slot = task.timers.arm(hash, key, deadline);
            disarm(&mut task.timers, &mut state.waiting, old);
            return Ok(());
        }
        if state.waiting.is_full() {
            // 2^32 − 1 keys already wait: add now rather than lose the key.
            return self.add_locked(state, Cow::Owned(key), None, p, wake);
        }
        state.wait_seq += 1;
        let slot = task.timers.arm(hash, key.clone(), deadline);
        state
            .waiting
            .insert(hash, key, deadline, p, state.wait_seq, slot);
        Ok(())
    }

    /// Starts the gauge refresh loop on the current runtime unless it runs already, the queue
    /// has no metrics or is shut down. A loop whose runtime shut down (a queue outliving it) is
    /// replaced the same way.
    fn ensure_metrics_task(self: &Arc<Self>, state: &mut State<K, S>) {
        let running = state.metrics_task.as_ref().is_some_and(|t| !t.is_closed());
        if running || !state.recorder.is_enabled() || self.shut_down_flag.load(Ordering::Acquire) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            if state.metrics_task.is_some() {
                debug!(queue = %self.name, "metrics task restarted");
            }
            let (alive, held) = oneshot::channel();
            state.metrics_task = Some(alive);
            runtime.spawn(metrics_loop(Arc::downgrade(self), held));
            self.clock.set_runtime(&runtime);
        }
    }

    fn arc(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }
}

/// Refreshes the unfinished-work gauges every period until shutdown or the last handle drops.
async fn metrics_loop<K, S>(shared: Weak<Shared<K, S>>, _alive: oneshot::Receiver<()>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
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
        shared.lock().recorder.update_unfinished_work(&shared.clock);
    }
}

impl<K, S> Backend<K, S::P> for Shared<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    fn get_wake(&self) -> &Notify {
        &self.get_wake
    }

    fn try_get(&self) -> Option<Option<(K, S::P)>> {
        let mut state = self.lock();
        match state.machine.pop() {
            PopOutcome::Item((key, p)) => {
                state
                    .recorder
                    .get_at_priority(&key, S::metric_priority(p), &self.clock);
                Some(Some((key, p)))
            }
            PopOutcome::Empty => None,
            PopOutcome::ShutDown => Some(None),
        }
    }

    fn done(&self, key: &K) {
        let hash = self.hash(key);
        let mut wake = Wake::default();
        {
            let mut state = self.lock();
            state.recorder.done(key, &self.clock);
            let now = self.now_nanos();
            match state.machine.done(key, hash, now) {
                // Counted by the metrics when it became dirty, not again here (as the original).
                DoneWith::Requeued(_) => wake.getters += 1,
                DoneWith::Finished | DoneWith::NotProcessing => {}
            }
            wake.idle = state.draining && state.machine.is_idle();
        }
        self.wake(wake);
    }

    fn add(&self, key: K, p: S::P) -> Result<(), ShutDownError<K>> {
        self.add_now(Cow::Owned(key), p)
    }

    fn add_ref(&self, key: &K, p: S::P) -> Result<(), ShutDownError<K>> {
        self.add_now(Cow::Borrowed(key), p)
    }

    fn add_after(self: Arc<Self>, key: K, p: S::P, delay: Duration) -> Result<(), ShutDownError<K>> {
        self.add_after_inner(key, p, delay)
    }

    fn add_rate_limited(self: Arc<Self>, key: K, p: S::P) -> Result<(), ShutDownError<K>> {
        if self.shut_down_flag.load(Ordering::Acquire) {
            return Err(ShutDownError(key));
        }
        // The limiter reads tokio's clock: from a plain thread, the queue's runtime clock.
        let delay = self.clock.in_runtime(|| self.limiter.when(&key));
        self.add_after_inner(key, p, delay)
    }

    fn forget(&self, key: &K) {
        self.limiter.forget(key);
    }

    fn rate_limit_delay(&self, key: &K) -> Duration {
        self.clock.in_runtime(|| self.limiter.when(key))
    }

    fn num_requeues(&self, key: &K) -> usize {
        self.limiter.num_requeues(key)
    }

    fn len(&self) -> usize {
        self.lock().machine.len()
    }

    fn processing_len(&self) -> usize {
        self.lock().machine.processing_len()
    }

    fn waiting_len(&self) -> usize {
        self.lock().waiting.len()
    }

    fn shut_down(&self, drain: bool) {
        let first = {
            let mut state = self.lock();
            let first = state.machine.shut_down();
            self.shut_down_flag.store(true, Ordering::Release);
            // Waiting keys are never added now: drop them and their timers, and end the delay
            // task (its request channel closes).
            state.waiting.clear();
            state.delay_task = None;
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
    }

    fn is_shutting_down(&self) -> bool {
        self.shut_down_flag.load(Ordering::Acquire)
    }

    fn idle_wake(&self) -> &Notify {
        &self.idle_wake
    }

    fn drain_over(&self) -> bool {
        let state = self.lock();
        state.machine.is_idle() || !state.draining
    }

    fn settle(&self) -> Option<oneshot::Receiver<()>> {
        let state = self.lock();
        let task = state.delay_task.as_ref()?;
        let (done_tx, done_rx) = oneshot::channel();
        task.settle.send(done_tx).ok()?;
        Some(done_rx)
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        let state = self.lock();
        f.debug_struct(kind)
            .field("name", &self.name)
            .field("len", &state.machine.len())
            .field("processing", &state.machine.processing_len())
            .field("waiting", &state.waiting.len())
            .field("shutting_down", &state.machine.is_shut_down())
            .finish()
    }
}

/// Waits until a drain is over (see the handles' `shut_down_with_drain`).
pub(crate) async fn wait_drained<K, P>(core: &dyn Backend<K, P>) {
    loop {
        let idle = core.idle_wake().notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if core.drain_over() {
            return;
        }
        idle.await;
    }
}
