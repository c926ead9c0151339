//! [`Shared`], the state behind a [`WorkQueue`](crate::WorkQueue) or a
//! [`PriorityQueue`](crate::PriorityQueue) and behind the items they hand out: one state over
//! the queue's state machine ([`Machine`]: the work queue's or the priority queue's), which the
//! two public queues wrap: adds, hand-outs, dones, shutdown, and the timer's task, which adds
//! the waiting keys (`waiting`) at their deadlines and refreshes the metrics' gauges.
//!
//! One lock (parking_lot, never held across an `.await`), `state`, guards everything that
//! changes: the state machine, the metrics recorder, the waiting keys and the queue's
//! [`Timer`]. Three `Notify`s carry the wake-ups, sent once the lock is released:
//! `get_wake` (one waiting `get` per queued key), `stream_wake` (every waiting stream) and
//! `idle_wake` (drains). The protocol is in the crate's design docs.
//!
//! The steps of the add, get and done paths (`lock`, `add_locked`, `added`, `end_wait`, the
//! machine's dispatch) are `#[inline]`: without the hint the release build calls each out of
//! line, and a hot key's add costs a third more (`benches/RESULTS.md`).

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use ctrlq_queue_core::{AddOutcome, DoneOutcome, PopOutcome, PriorityState, WorkState};
use ctrlq_ratelimit::RateLimiter;
use hashbrown::{HashMap, HashSet};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, trace};

use crate::InBackoff;
use crate::error::AddError;
use crate::metrics::{MetricsProvider, Recorder, UNFINISHED_WORK_UPDATE_PERIOD};
use crate::timer::{QueueClock, Timed, Timer};
use crate::wait::{WAKES, WaitOn};
use crate::workqueue::MAX_DELAY;

mod waiting;

use self::waiting::{CHUNK, Waiting};

/// The bounds every queue key meets.
pub(crate) trait QueueKey: Hash + Eq + Clone + Send + Sync {}
impl<K: Hash + Eq + Clone + Send + Sync> QueueKey for K {}

/// A queue's state machine, as [`Shared`] drives it. Every add carries a priority, which the
/// work queue's machine ignores (its keys are handed out at priority 0). `now` gives the
/// nanoseconds since the queue was built; only the priority queue's machine reads it (it ages
/// its keys).
pub(crate) enum Machine<K> {
    Work(WorkState<K>),
    Priority(PriorityState<K>),
}

impl<K: QueueKey> Machine<K> {
    /// The priority queue's machine, which differs from the work queue's in three more ways:
    /// - the depth metric carries a priority label;
    /// - a delayed add with a zero delay is not a retry (controller-runtime's priority queue
    ///   counts only delays above zero, client-go's delaying queue every `AddAfter`);
    /// - keys due at one instant with one priority are ordered by their add counter, which a
    ///   key's first delayed add and each raise of its priority set, and a deadline move keeps
    ///   (controller-runtime's priority queue); the work queue orders them by the delayed add
    ///   that set their deadline (client-go leaves such ties unordered).
    fn has_priority(&self) -> bool {
        matches!(self, Machine::Priority(_))
    }

    #[inline]
    fn add(&mut self, key: K, priority: i32, now: impl FnOnce() -> u64) -> AddOutcome<K> {
        match self {
            Machine::Work(m) => m.add(key),
            Machine::Priority(m) => m.add(key, priority, now()),
        }
    }

    #[inline]
    fn pop(&mut self) -> PopOutcome<(K, i32)> {
        match self {
            Machine::Work(m) => match m.pop() {
                PopOutcome::Item(key) => PopOutcome::Item((key, 0)),
                PopOutcome::Empty => PopOutcome::Empty,
                PopOutcome::ShutDown => PopOutcome::ShutDown,
            },
            Machine::Priority(m) => m.pop(),
        }
    }

    /// Ends `key`'s hand-out; `true` if it was queued again (added while processing).
    #[inline]
    fn done(&mut self, key: &K, now: impl FnOnce() -> u64) -> bool {
        match self {
            Machine::Work(m) => matches!(m.done(key), DoneOutcome::Requeued(())),
            Machine::Priority(m) => matches!(m.done(key, now()), DoneOutcome::Requeued(_)),
        }
    }

    fn shut_down(&mut self) -> bool {
        match self {
            Machine::Work(m) => m.shut_down(),
            Machine::Priority(m) => m.shut_down(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Machine::Work(m) => m.len(),
            Machine::Priority(m) => m.len(),
        }
    }

    fn processing_len(&self) -> usize {
        match self {
            Machine::Work(m) => m.processing_len(),
            Machine::Priority(m) => m.processing_len(),
        }
    }

    /// Nothing queued, nothing processing.
    fn is_idle(&self) -> bool {
        match self {
            Machine::Work(m) => m.is_idle(),
            Machine::Priority(m) => m.is_idle(),
        }
    }

    fn is_processing(&self, key: &K) -> bool {
        match self {
            Machine::Work(m) => m.is_processing(key),
            Machine::Priority(m) => m.is_processing(key),
        }
    }

    /// Whether a delayed add of `key` is absorbed because the key will be handed out without
    /// it: ready, or re-added while processing (the priority queue's rule, controller-runtime's;
    /// the work queue always waits, as client-go's delaying queue).
    fn absorbs_delayed(&self, key: &K) -> bool {
        match self {
            Machine::Work(_) => false,
            Machine::Priority(m) => m.is_dirty(key),
        }
    }
}

/// The builder options every queue has.
pub(crate) struct Options<K> {
    pub(crate) name: String,
    pub(crate) metrics: Option<Arc<dyn MetricsProvider>>,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
    pub(crate) in_backoff: InBackoff,
}

impl<K> Default for Options<K> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics: None,
            limiter: None,
            in_backoff: InBackoff::RunNow,
        }
    }
}

impl<K> fmt::Debug for Options<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("metrics", &self.metrics.is_some())
            .field("rate_limiter", &self.limiter.is_some())
            .field("in_backoff", &self.in_backoff)
            .finish()
    }
}

/// The state behind a queue and its items. See the module docs.
pub(crate) struct Shared<K: QueueKey> {
    /// This state, for the timer's task (which holds it weakly).
    me: Weak<Self>,
    name: String,
    /// The queue's one lock: every add, get and done takes it.
    state: Mutex<State<K>>,
    /// Woken once per key queued: one waiting `get` takes it.
    get_wake: Notify,
    /// Woken for every key queued while a stream waits: every waiting stream looks.
    pub(crate) stream_wake: Notify,
    /// Woken when a drain may be over.
    idle_wake: Notify,
    /// Streams waiting for a key (each registered in `stream_wake`).
    pub(crate) streams_waiting: AtomicUsize,
    limiter: Arc<dyn RateLimiter<K>>,
    in_backoff: InBackoff,
    /// Set, under the lock, when the state machine starts refusing adds.
    shutting_down: AtomicBool,
    /// A drain is under way (`shut_down_with_drain`).
    draining: AtomicBool,
    /// Read for priority aging, the metrics and deadlines, so that calls from any thread share
    /// the runtime's clock.
    clock: QueueClock,
    origin: Instant,
}

/// Guarded by [`Shared::state`].
struct State<K: QueueKey> {
    machine: Machine<K>,
    /// With metrics only.
    recorder: Option<Box<Recorder<K>>>,
    /// Keys handed out and taken out of their item with `into_key`: the only hand-outs the
    /// queue's `done` ends. Every other hand-out is ended by its item alone, so a `done` never
    /// ends a later hand-out of the same key.
    detached: HashSet<K>,
    /// The keys waiting for their deadline.
    waiting: Waiting<K>,
    /// With [`InBackoff::WaitOut`]: keys added while processed after a failure, with the
    /// priority of the add, held until their processing ends (see [`Shared::done_item`]).
    held: HashMap<K, i32>,
    /// With metrics, when the timer's task next refreshes the unfinished-work gauges: set at
    /// its first poll.
    refresh_at: Option<Instant>,
    /// The one sleep, at the earliest of the waiting keys' deadlines and `refresh_at`. Its task
    /// starts at the first delayed add, or with metrics at the first add.
    timer: Timer,
}

/// What to wake once the lock is released.
#[derive(Default)]
#[must_use]
struct Wake {
    getters: usize,
    idle: bool,
}

impl<K: QueueKey + 'static> Shared<K> {
    pub(crate) fn new(options: Options<K>, machine: Machine<K>) -> Arc<Self> {
        let Options {
            name,
            metrics,
            limiter,
            in_backoff,
        } = options;
        let recorder = Recorder::new(&name, metrics);
        let limiter =
            limiter.unwrap_or_else(|| Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        let clock = QueueClock::new();
        Arc::new_cyclic(|me| Shared {
            me: me.clone(),
            name,
            state: Mutex::new(State {
                waiting: Waiting::new(machine.has_priority()),
                machine,
                recorder,
                detached: HashSet::new(),
                held: HashMap::new(),
                refresh_at: None,
                timer: Timer::default(),
            }),
            get_wake: Notify::new(),
            stream_wake: Notify::new(),
            idle_wake: Notify::new(),
            streams_waiting: AtomicUsize::new(0),
            limiter,
            in_backoff,
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            origin: clock.now(),
            clock,
        })
    }

    /// The lock. parking_lot's lock does not poison; every transition completes or changes
    /// nothing before a user's Hash/Eq could panic under it. An acquisition that finds it held
    /// is traced (see [`WAKES`]).
    #[inline]
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        if let Some(guard) = self.state.try_lock() {
            return guard;
        }
        trace!(name: "contended_lock", target: WAKES, "the lock was held");
        self.state.lock()
    }

    /// The machine's clock: nanoseconds since the queue was built.
    fn now_nanos(&self) -> u64 {
        let since = self.clock.now().saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Wakes what a locked step asked for; call after releasing the lock.
    #[inline]
    fn wake(&self, wake: Wake) {
        for _ in 0..wake.getters {
            trace!(name: "wake", target: WAKES, "a get woken");
            self.get_wake.notify_one();
        }
        if wake.getters > 0 && self.streams_waiting.load(Ordering::SeqCst) > 0 {
            trace!(name: "wake", target: WAKES, "the streams woken");
            self.stream_wake.notify_waiters();
        }
        if wake.idle {
            self.idle_wake.notify_waiters();
        }
    }

    /// Runs `f` under the lock, then wakes what it asked for.
    fn with_lock<R>(&self, f: impl FnOnce(&mut State<K>, &mut Wake) -> R) -> R {
        let mut wake = Wake::default();
        let r = f(&mut self.lock(), &mut wake);
        self.wake(wake);
        r
    }

    // ===== adds =====

    /// Adds `key` now at `priority`; a wait of the key ends (its priority is kept if higher).
    #[inline]
    pub(crate) fn add(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        let mut wake = Wake::default();
        let mut state = self.lock();
        self.add_locked(&mut state, key, priority, true, &mut wake)?;
        drop(state);
        self.wake(wake);
        Ok(())
    }

    /// Adds `keys` now, in order, at priority 0 (see `WorkQueue::add_all`).
    pub(crate) fn add_all(&self, keys: Vec<K>) -> Result<(), AddError<Vec<K>>> {
        self.add_all_at(keys, |key| (key, 0))
    }

    /// Adds `items` now, in order, each as the key and the priority `split` makes of it.
    pub(crate) fn add_all_at<T>(
        &self,
        items: Vec<T>,
        split: impl Fn(T) -> (K, i32),
    ) -> Result<(), AddError<Vec<T>>> {
        self.with_lock(|state, wake| {
            if self.is_shutting_down() {
                return Err(AddError::ShutDown(items));
            }
            for item in items {
                let (key, priority) = split(item);
                // The state is open under this hold of the lock: every add succeeds.
                let _ = self.add_locked(state, key, priority, true, wake);
            }
            Ok(())
        })
    }

    /// Adds `key` now, under the lock, asking `wake` to wake a getter if it was queued. A
    /// caller's add (`by_caller`; not the timer's) first ends a wait the key may have, and with
    /// metrics has the timer's task, which refreshes the gauges, run.
    #[inline]
    fn add_locked(
        &self,
        state: &mut State<K>,
        key: K,
        priority: i32,
        by_caller: bool,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        let priority = if by_caller {
            if self.in_backoff == InBackoff::WaitOut && self.held_for_backoff(state, &key, priority)
            {
                return Ok(());
            }
            state.end_wait(&key, priority)
        } else {
            priority
        };
        // The recorder needs the key after the machine took it: cloned only with metrics.
        let metric_key = state.recorder.is_some().then(|| key.clone());
        let added = state.machine.add(key, priority, || self.now_nanos());
        if by_caller && metric_key.is_some() {
            self.start_timer(state);
        }
        wake.getters += self.added(state, added, metric_key.as_ref(), priority)?;
        Ok(())
    }

    /// With [`InBackoff::WaitOut`], whether an add of `key` at `priority` is held by its
    /// backoff: the key waits out a rate-limited add (the wait then takes the higher priority),
    /// or it is processed while its limiter counts failures (the add is held until it is done).
    #[inline(never)]
    fn held_for_backoff(&self, state: &mut State<K>, key: &K, priority: i32) -> bool {
        if state.waiting.raise_backoff(key, priority) {
            return true;
        }
        if !state.machine.is_processing(key) || self.limiter.num_requeues(key) == 0 {
            return false;
        }
        let held = state.held.entry(key.clone()).or_insert(priority);
        *held = (*held).max(priority);
        true
    }

    /// Counts what the machine did with an add (`key`: for the metrics, `None` without) and
    /// returns the getters to wake: one if it queued the key.
    #[inline]
    fn added(
        &self,
        state: &mut State<K>,
        added: AddOutcome<K>,
        key: Option<&K>,
        priority: i32,
    ) -> Result<usize, AddError<K>> {
        let (getters, newly_dirty) = match added {
            AddOutcome::Queued => (1, true),
            // Dirty while processing: counted by depth and adds, as the original.
            AddOutcome::Deferred { newly_dirty } => (0, newly_dirty),
            AddOutcome::Raised { from } => {
                if let Some(recorder) = &mut state.recorder {
                    recorder.reprioritize(key, from, priority);
                }
                (0, false)
            }
            AddOutcome::Coalesced => (0, false),
            AddOutcome::ShutDown(key) => return Err(AddError::ShutDown(key)),
        };
        if newly_dirty
            && let Some(key) = key
            && let Some(recorder) = &mut state.recorder
        {
            let label = state.machine.has_priority().then_some(priority);
            recorder.add_at_priority(key, label, &self.clock);
        }
        Ok(getters)
    }

    /// Adds `key` at `priority` once `delay` has passed (see `WorkQueue::add_after`).
    pub(crate) fn add_after(
        &self,
        key: K,
        priority: i32,
        delay: Duration,
    ) -> Result<(), AddError<K>> {
        self.add_after_as(key, priority, delay, false)
    }

    /// Adds `key` at `priority` once `delay` has passed; `backoff`: the delay is a failure's
    /// backoff (a rate-limited add), which ends a hold of the key (the backoff brings it back).
    pub(crate) fn add_after_as(
        &self,
        key: K,
        priority: i32,
        delay: Duration,
        backoff: bool,
    ) -> Result<(), AddError<K>> {
        self.with_lock(|state, wake| {
            if self.is_shutting_down() {
                return Err(AddError::ShutDown(key));
            }
            if backoff && !state.held.is_empty() {
                state.held.remove(&key);
            }
            if let Some(recorder) = &state.recorder
                && (!delay.is_zero() || !state.machine.has_priority())
            {
                recorder.retry();
            }
            if delay.is_zero() || state.machine.absorbs_delayed(&key) {
                return self.add_locked(state, key, priority, true, wake);
            }
            self.wait(state, key, priority, delay.min(MAX_DELAY), backoff, wake)
        })
    }

    /// Adds `key` at `priority` after the rate limiter's delay for it.
    pub(crate) fn add_rate_limited(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        if self.is_shutting_down() {
            return Err(AddError::ShutDown(key));
        }
        let delay = self.rate_limit_delay(&key);
        self.add_after_as(key, priority, delay, true)
    }

    /// Charges the rate limiter for `key` and returns its delay. The limiter reads tokio's
    /// clock: from a plain thread, the queue's runtime clock.
    pub(crate) fn rate_limit_delay(&self, key: &K) -> Duration {
        self.clock.in_runtime(|| self.limiter.when(key))
    }

    /// Makes `key` wait `delay`, starting the timer's task if it does not run. With no
    /// runtime to time the wait (none bound yet and none here), the key is added now rather
    /// than lost.
    fn wait(
        &self,
        state: &mut State<K>,
        key: K,
        priority: i32,
        delay: Duration,
        backoff: bool,
        wake: &mut Wake,
    ) -> Result<(), AddError<K>> {
        if !self.start_timer(state) {
            debug!(queue = %self.name, "delayed add with no tokio runtime; adding now");
            return self.add_locked(state, key, priority, false, wake);
        }
        // The deadline is read by the queue's runtime's clock (paused, in tests), whatever
        // thread this add comes from.
        let at = self.clock.now() + delay;
        if state.waiting.wait_until(key, priority, at, backoff) {
            state.timer.arm(Some(at));
        }
        Ok(())
    }

    /// Has the timer's task run (see [`Timer::start`]); `false` with no runtime to run it, or
    /// after shutdown.
    fn start_timer(&self, state: &mut State<K>) -> bool {
        !self.is_shutting_down() && state.timer.start(&self.clock, &self.me)
    }

    pub(crate) fn forget(&self, key: &K) {
        self.limiter.forget(key);
    }

    pub(crate) fn num_requeues(&self, key: &K) -> usize {
        self.limiter.num_requeues(key)
    }

    // ===== hand-outs and their end =====

    /// The handles' `done`: ends the hand-out of `key` if it was taken out of its item with
    /// `into_key` and not done since. Ignored otherwise: a key not processing, already done, or
    /// held by an item (whose own drop ends it).
    pub(crate) fn done(&self, key: &K) {
        if self.lock().detached.remove(key) {
            // Still processing: no other `done` finds it detached, no `get` hands it out.
            self.done_item(key);
        } else {
            debug!(queue = %self.name, "done for a key not taken out of its item; ignored");
        }
    }

    /// Ends the hand-out of `key`: called by the item that holds it (its drop or a consuming
    /// method) or by the handles' `done` for a detached key, once, so it ends that hand-out and
    /// no later one. A getter is woken if the key was queued again (added while processing), a
    /// drain if the queue became idle.
    pub(crate) fn done_item(&self, key: &K) {
        let mut state = self.lock();
        if let Some(recorder) = &mut state.recorder {
            recorder.done(key, &self.clock);
        }
        let requeued = state.machine.done(key, || self.now_nanos());
        // An add held while the key was processed after a failure: its processing ended
        // without a new backoff (it succeeded), so the add is made now.
        if !state.held.is_empty()
            && let Some((key, priority)) = state.held.remove_entry(key)
        {
            let mut wake = Wake {
                getters: usize::from(requeued),
                ..Wake::default()
            };
            // The state is open (a shutdown clears the held adds) and the key no longer
            // processing: the add is made.
            let _ = self.add_locked(&mut state, key, priority, true, &mut wake);
            drop(state);
            self.wake(wake);
            return;
        }
        let wake = if requeued {
            // Counted by the metrics when it became dirty, not again here (as the original).
            Wake {
                getters: 1,
                ..Wake::default()
            }
        } else {
            // The last hand-out may have ended: a drain is woken.
            Wake {
                idle: self.draining.load(Ordering::SeqCst) && state.machine.is_idle(),
                ..Wake::default()
            }
        };
        drop(state);
        self.wake(wake);
    }

    /// `key`'s item gave up its hand-out (`into_key`): the handles' `done` ends it now.
    pub(crate) fn detach(&self, key: &K) {
        self.lock().detached.insert(key.clone());
    }

    /// A worker panicked holding `key` in an item: adds it back rate limited (a failure), then
    /// ends the item's hand-out. After shutdown the add is refused and the hand-out only ended.
    pub(crate) fn requeue_after_panic(&self, key: K, priority: i32) {
        debug!(queue = %self.name, "a worker panicked holding a key; requeued rate limited");
        let _ = self.add_rate_limited(key.clone(), priority);
        self.done_item(&key);
    }

    // ===== shutdown =====

    /// Shuts down: adds refused, waiting keys and the timer dropped, the timer's task
    /// stopped, every waiting `get` and stream woken. With `drain`, a drain starts.
    pub(crate) fn shut_down(&self, drain: bool) {
        self.draining.store(drain, Ordering::SeqCst);
        let first = {
            let mut state = self.lock();
            // Waiting keys are never added now: drop them; the timer's task, woken, ends.
            state.waiting.clear();
            state.held.clear();
            state.refresh_at = None;
            state.timer.end();
            // Set under the lock: a step that holds it sees the machine and the flag agree.
            self.shutting_down.store(true, Ordering::Release);
            state.machine.shut_down()
        };
        if first {
            debug!(queue = %self.name, drain, "shutting down");
        }
        trace!(name: "wake", target: WAKES, "the gets woken: shut down");
        self.get_wake.notify_waiters();
        trace!(name: "wake", target: WAKES, "the streams woken: shut down");
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
            if !self.draining.load(Ordering::SeqCst) || self.lock().machine.is_idle() {
                return;
            }
            idle.await;
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    // ===== reads =====

    pub(crate) fn len(&self) -> usize {
        self.lock().machine.len()
    }

    pub(crate) fn processing_len(&self) -> usize {
        self.lock().machine.processing_len()
    }

    pub(crate) fn waiting_len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// The queue's `Debug`: its state, not its internals.
    pub(crate) fn describe(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        f.debug_struct(kind)
            .field("name", &self.name)
            .field("len", &self.len())
            .field("processing", &self.processing_len())
            .field("waiting", &self.waiting_len())
            .field(
                "streams_waiting",
                &self.streams_waiting.load(Ordering::Relaxed),
            )
            .field("shutting_down", &self.is_shutting_down())
            .finish()
    }
}

// ===== the timer's task =====

impl<K: QueueKey + 'static> Shared<K> {
    /// Adds keys whose wait is over, in the given order, under the lock.
    fn add_due(&self, state: &mut State<K>, due: Vec<(K, i32)>, wake: &mut Wake) {
        if due.is_empty() {
            return;
        }
        let n = due.len();
        for (key, priority) in due {
            // Refused only after a shutdown, which drops the waiting keys first: never here.
            let _ = self.add_locked(state, key, priority, false, wake);
        }
        debug!(queue = %self.name, due = n, "delays over");
    }

    /// With metrics, refreshes the unfinished-work gauges if their period is over at `now`,
    /// and sets the next refresh a period later (the first, a period after the task's first
    /// poll).
    fn refresh(&self, state: &mut State<K>, now: Instant) {
        let Some(recorder) = &state.recorder else {
            return;
        };
        match state.refresh_at {
            Some(at) if at > now => return,
            Some(_) => recorder.update_unfinished_work(&self.clock),
            None => {}
        }
        state.refresh_at = Some(now + UNFINISHED_WORK_UPDATE_PERIOD);
    }

    /// Adds every waiting key whose deadline is at or before now (test helper).
    #[cfg(feature = "test-util")]
    pub(crate) fn settle(&self) {
        self.with_lock(|state, wake| {
            let due = state.waiting.take_due(self.clock.now(), usize::MAX);
            self.add_due(state, due, wake);
        });
    }
}

/// The timer's task (see [`Timer`]).
impl<K: QueueKey + 'static> Timed for Shared<K> {
    /// Adds the waiting keys whose deadline has passed, in deadline order, a chunk at a time
    /// (see `waiting`), and with metrics refreshes the gauges when their period is over; `cx`
    /// is woken at once while keys are due, else at the next deadline or refresh.
    fn poll_timers(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.with_lock(|state, wake| {
            if self.is_shutting_down() {
                return Poll::Ready(());
            }
            let now = Instant::now();
            let due = state.waiting.take_due(now, CHUNK);
            self.add_due(state, due, wake);
            self.refresh(state, now);
            let next = state.next_deadline();
            state.timer.poll(cx, next, now);
            Poll::Pending
        })
    }
}

// ===== impl State =====

impl<K: QueueKey> State<K> {
    /// Ends `key`'s wait if it has one; returns the higher of its waiting priority and
    /// `priority`.
    #[inline]
    fn end_wait(&mut self, key: &K, priority: i32) -> i32 {
        if self.waiting.is_empty() {
            // Every add asks: no key is hashed while none waits.
            return priority;
        }
        let Some(waited) = self.waiting.cancel(key) else {
            return priority;
        };
        if self.waiting.is_empty() {
            // No key waits any more: the sleep is dropped, unless the gauges need it.
            let next = self.next_deadline();
            self.timer.arm(next);
        }
        priority.max(waited)
    }

    /// The earliest of the waiting keys' deadlines and the next refresh of the gauges.
    fn next_deadline(&self) -> Option<Instant> {
        match (self.waiting.next_deadline(), self.refresh_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `get`: one waiting `get` per queued key is woken.
impl<K: QueueKey + 'static> WaitOn for Shared<K> {
    type Output = Option<(K, i32)>;

    fn notify(&self) -> &Notify {
        &self.get_wake
    }

    /// Hands out the next key: `Some(Some(_))`, `Some(None)` once shut down and empty, or
    /// `None` to wait.
    fn try_take(&self) -> Option<Option<(K, i32)>> {
        let mut state = self.lock();
        match state.machine.pop() {
            PopOutcome::Item((key, priority)) => {
                trace!(name: "hand_out", target: WAKES, "a key handed out");
                let label = state.machine.has_priority().then_some(priority);
                if let Some(recorder) = &mut state.recorder {
                    recorder.get_at_priority(&key, label, &self.clock);
                }
                Some(Some((key, priority)))
            }
            PopOutcome::ShutDown => Some(None),
            PopOutcome::Empty => None,
        }
    }
}
