//! The delay task: it polls the queue's timers, so that keys whose delay is over are added at
//! their deadline, and ends when the queue shuts down or its last handle is dropped.
//!
//! The timers (a `tokio_util::time::DelayQueue`) live in the queue's state, under its lock:
//! `add_after` sets a key's timer there directly, and `DelayQueue` wakes this task when a new
//! timer is earlier than the one it sleeps on. The task wakes exactly at the next deadline; it
//! never polls on a heartbeat, and no channel stands between producers and the timers.
//!
//! Once, at its start, the task finds where tokio's timer grid lies, so that a key is timed by
//! tokio's first millisecond after its deadline rather than rounded up to two grids in turn.
//! Each time it wakes, it also takes the keys that have come due since that millisecond ended
//! (tokio's driver wakes up to a millisecond after it): a key waits at most for the next wake
//! after its deadline.

use std::future::{Future, poll_fn};
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use tokio::sync::{mpsc, oneshot};
use tokio::task::unconstrained;
use tokio::time::{Instant, Sleep};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;
use tracing::{Instrument, debug, debug_span};

use super::{Machine, Shared};

/// Runs until `settle` closes (shutdown, or the queue is dropped) or the queue is gone.
pub(crate) async fn run<K, S>(
    shared: Weak<Shared<K, S>>,
    mut settle: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    name: String,
) where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    let span = debug_span!("workqueue_delay", queue = %name);
    async move {
        debug!("delay task started");
        // Once, while the timers run: find tokio's timer grid, so keys ring up to a
        // millisecond sooner (see `Timers::align`).
        let align = async {
            if let Some(grid) = find_grid().await
                && let Some(shared) = shared.upgrade()
            {
                shared.align_timers(grid, PROBE_STEP);
            }
            std::future::pending::<()>().await;
        };
        tokio::pin!(align);
        loop {
            tokio::select! {
                () = &mut align => {}
                request = settle.recv() => match request {
                    Some(reply) => {
                        // Fire what is due at this instant, then answer.
                        if !poll_once(&shared).await {
                            break;
                        }
                        let _ = reply.send(());
                    }
                    None => break,
                },
                // Unconstrained: the keys due at one instant are added in one batch, in priority
                // order, rather than cut where tokio's cooperative budget runs out.
                () = unconstrained(poll_fn(|cx| match shared.upgrade() {
                    Some(shared) => {
                        shared.poll_timers(cx);
                        Poll::Pending
                    }
                    None => Poll::Ready(()),
                })) => break,
            }
        }
        debug!("delay task ended");
    }
    .instrument(span)
    .await;
}

/// The spacing of [`find_grid`]'s probes, and so its error.
const PROBE_STEP: Duration = Duration::from_micros(10);

/// Finds an instant that is at most [`PROBE_STEP`] before one at which tokio's timer ends the
/// timers of a millisecond; `None` if three tries saw no clear boundary.
///
/// tokio's timer rounds every deadline up to a millisecond of its own grid, and a pass of its
/// driver ends every timer whose millisecond has begun. So of probes set every
/// [`PROBE_STEP`] over 2 ms, those that have ended after the first one did are the ones up to
/// a grid instant, however late this task runs: the boundary between ended and running probes
/// is that instant. Two reads must agree (a pass of the driver may be under way on another
/// thread). Under paused time this is exact as well.
async fn find_grid() -> Option<Instant> {
    const PROBES: u32 = 201;
    for _ in 0..3 {
        let base = Instant::now();
        let mut probes: Vec<Pin<Box<Sleep>>> = (0..PROBES)
            .map(|i| Box::pin(tokio::time::sleep_until(base + PROBE_STEP * i)))
            .collect();
        // Register every probe with the timer (only the first one wakes this task).
        {
            let mut quiet = Context::from_waker(Waker::noop());
            for probe in probes.iter_mut().skip(1) {
                let _ = probe.as_mut().poll(&mut quiet);
            }
        }
        if let Some(first) = probes.first_mut() {
            first.as_mut().await;
        }
        let (a, b) = (ended_prefix(&probes), ended_prefix(&probes));
        if let Some(i) = a
            && a == b
        {
            return Some(base + PROBE_STEP * i);
        }
    }
    None
}

/// The index of the last ended probe, if the ended ones come first and some still run.
fn ended_prefix(probes: &[Pin<Box<Sleep>>]) -> Option<u32> {
    let ended = probes.iter().take_while(|p| p.is_elapsed()).count();
    let prefix = probes.iter().skip(ended).all(|p| !p.is_elapsed());
    (prefix && ended > 0 && ended < probes.len())
        .then(|| u32::try_from(ended - 1).ok())
        .flatten()
}

/// Polls the timers once; `false` if the queue is gone.
async fn poll_once<K, S>(shared: &Weak<Shared<K, S>>) -> bool
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    unconstrained(poll_fn(|cx| {
        Poll::Ready(
            shared
                .upgrade()
                .map(|shared| shared.poll_timers(cx))
                .is_some(),
        )
    }))
    .await
}

/// The timers of the waiting keys, one `DelayQueue` entry per millisecond that has keys due.
///
/// `DelayQueue` rounds every deadline up to its millisecond grid anyway, so keys due in the same
/// millisecond ring together; grouping them here first makes its per-entry work (a slab entry,
/// a new `Sleep` registered with the runtime's timer for each entry it hands out) per
/// millisecond instead of per key. The grid is the `DelayQueue`'s own: `origin` is read just
/// before it is made, so millisecond `t` rings at `origin + t` ms, which it rounds to `t`.
/// Once the delay task has found tokio's own grid, each key goes to the millisecond whose timer
/// tokio ends first at or after the key's deadline (see [`align`](Self::align)).
pub(crate) struct Timers<K> {
    queue: DelayQueue<u64>,
    origin: Instant,
    /// How far past each of our grid's milliseconds tokio's timer ends it, at least (see
    /// [`align`](Self::align)); zero until measured.
    phase: Duration,
    ticks: HashMap<u64, Tick<K>>,
    /// The latest millisecond that rang.
    rung: u64,
}

/// What [`Timers::poll_due`] found: keys past their deadline, and keys whose millisecond rang
/// early, which may not be.
pub(crate) struct Due<K> {
    pub(crate) due: Vec<(u64, K)>,
    pub(crate) early: Vec<(u64, K)>,
}

/// The keys due in one millisecond (with their hashes) and the `DelayQueue` entry that rings
/// for them.
struct Tick<K> {
    timer: Key,
    keys: Vec<(u64, K)>,
}

/// Where a waiting key's timer is: its millisecond and its place among that millisecond's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    tick: u64,
    index: usize,
}

impl<K: Clone> Timers<K> {
    pub(crate) fn new() -> Self {
        let origin = Instant::now();
        Timers {
            queue: DelayQueue::new(),
            origin,
            phase: Duration::ZERO,
            ticks: HashMap::new(),
            rung: 0,
        }
    }

    /// The first millisecond `t` of the grid whose timer ends at or after `deadline`: tokio
    /// ends the timer of millisecond `t` at `origin + t ms + phase` or later.
    fn tick_of(&self, deadline: Instant) -> u64 {
        ceil_ms(deadline.saturating_duration_since(self.origin + self.phase))
    }

    /// Takes tokio's timer grid into account: `grid` is at or at most `error` before an instant
    /// at which tokio's timer ends the timers of a millisecond.
    ///
    /// `DelayQueue` sleeps until `origin + t ms`, and tokio rounds that up again, to its own
    /// millisecond grid, which starts when the runtime was built: every timer ends the same
    /// `phase` (0 to 1 ms) after our grid's millisecond. Not knowing it, a key due just after
    /// `origin + (t − 1) ms` waits for `origin + t ms + phase`; knowing it, the key is timed by
    /// the millisecond whose timer ends first at or after its deadline, which is up to `phase`
    /// sooner. `phase` is rounded down, so no timer ends before its keys' deadline.
    pub(crate) fn align(&mut self, grid: Instant, error: Duration) {
        const MS: u128 = 1_000_000;
        let phase = grid.saturating_duration_since(self.origin).as_nanos() % MS;
        // The true phase is in [phase, phase + error): if that range wraps past a millisecond,
        // the true phase may be near zero.
        self.phase = if phase + error.as_nanos() < MS {
            Duration::from_nanos(phase as u64)
        } else {
            Duration::ZERO
        };
        debug!(
            phase_us = self.phase.as_micros() as u64,
            "delay timers aligned to tokio's grid"
        );
    }

    /// Sets a timer for `key` (whose hash in the waiting map is `hash`) at `deadline`. Callers
    /// enter the delay task's runtime: a new `DelayQueue` entry may create a `Sleep`.
    pub(crate) fn arm(&mut self, hash: u64, key: K, deadline: Instant) -> Slot {
        let tick = self.tick_of(deadline);
        self.arm_tick(hash, key, tick)
    }

    /// Sets the timer of a key whose millisecond rang before its deadline (see
    /// [`poll_due`](Self::poll_due)) at the first millisecond of the grid after it, ignoring
    /// the phase: that millisecond has not rung yet, and its timer ends after the deadline.
    pub(crate) fn rearm(&mut self, hash: u64, key: K, deadline: Instant) -> Slot {
        let tick = ceil_ms(deadline.saturating_duration_since(self.origin));
        self.arm_tick(hash, key, tick)
    }

    fn arm_tick(&mut self, hash: u64, key: K, tick: u64) -> Slot {
        let tick_entry = match self.ticks.entry(tick) {
            hashbrown::hash_map::Entry::Occupied(e) => e.into_mut(),
            hashbrown::hash_map::Entry::Vacant(e) => {
                let at = self.origin + Duration::from_millis(tick);
                e.insert(Tick {
                    timer: self.queue.insert_at(tick, at),
                    keys: Vec::new(),
                })
            }
        };
        tick_entry.keys.push((hash, key));
        Slot {
            tick,
            index: tick_entry.keys.len() - 1,
        }
    }

    /// Removes the timer at `slot`. Another key of the same millisecond may move into its place:
    /// that key and its hash are returned, and its slot is now `slot`.
    pub(crate) fn disarm(&mut self, slot: Slot) -> Option<(u64, &K)> {
        let tick = self.ticks.get_mut(&slot.tick)?;
        if slot.index >= tick.keys.len() {
            debug_assert!(false, "a slot points past its millisecond's keys");
            return None;
        }
        tick.keys.swap_remove(slot.index);
        if tick.keys.is_empty() {
            if let Some(tick) = self.ticks.remove(&slot.tick) {
                self.queue.remove(&tick.timer);
            }
            return None;
        }
        let (hash, key) = self.ticks.get(&slot.tick)?.keys.get(slot.index)?;
        Some((*hash, key))
    }

    /// Takes every key (with its hash) whose millisecond rang; `cx` is woken at the next one,
    /// or when `arm` sets an earlier one.
    ///
    /// A millisecond rings when tokio's timer for it ends. That is never before the keys'
    /// deadlines unless [`align`](Self::align) overestimated the phase; keys of a millisecond
    /// that rang before `now` reached its end are returned apart, in `early`, for callers to
    /// check their deadlines and [`rearm`](Self::rearm) those not due.
    pub(crate) fn poll_due(&mut self, cx: &mut Context<'_>, now: Instant) -> Due<K> {
        let mut due = Due {
            due: Vec::new(),
            early: Vec::new(),
        };
        while let Poll::Ready(Some(expired)) = self.queue.poll_expired(cx) {
            let t = expired.into_inner();
            self.rung = self.rung.max(t);
            if let Some(tick) = self.ticks.remove(&t) {
                let end = self.origin + self.phase + Duration::from_millis(t);
                if now >= end {
                    due.due.extend(tick.keys);
                } else {
                    due.early.extend(tick.keys);
                }
            }
        }
        due
    }
}

/// Takes from `timers` the keys of milliseconds that have not rung but whose deadline is at or
/// before `now`, and removes them from `waiting`.
///
/// tokio's driver parks for whole milliseconds from wherever it stands in one, so the task
/// wakes up to a millisecond after the timer's end: the keys due meanwhile, which belong to
/// the next millisecond, are handed out now rather than at its end.
pub(crate) fn take_begun<K: Hash + Eq + Clone, P>(
    timers: &mut Timers<K>,
    waiting: &mut WaitingMap<K, P>,
    now: Instant,
) -> Vec<Waiting<K, P>> {
    let mut taken = Vec::new();
    // A key of millisecond `t` is due after `origin + (t − 1) ms`: only those begun by `now`
    // can hold due keys. Those rung are gone; of the rest, the latest few are looked at (a
    // stalled task leaves older ones, which ring at once anyway).
    let begun = ceil_ms(now.saturating_duration_since(timers.origin));
    let first = timers
        .rung
        .saturating_add(1)
        .max(begun.saturating_sub(MAX_BEGUN));
    for t in first..=begun {
        let Some(mut i) = timers.ticks.get(&t).map(|tick| tick.keys.len()) else {
            continue;
        };
        // From the end: a key that moves into a freed place has been looked at.
        while i > 0 {
            i -= 1;
            let slot = Slot { tick: t, index: i };
            let Some((hash, key)) = timers.ticks.get(&t).and_then(|tick| tick.keys.get(i)) else {
                break;
            };
            if waiting.get(*hash, key).is_some_and(|w| w.at <= now)
                && let Some(w) = waiting.remove(*hash, key)
            {
                taken.push(w);
                disarm(timers, waiting, slot);
            }
        }
    }
    taken
}

/// Removes the timer at `slot`, and records the new slot of the key that moved into its place.
pub(crate) fn disarm<K: Hash + Eq + Clone, P>(
    timers: &mut Timers<K>,
    waiting: &mut WaitingMap<K, P>,
    slot: Slot,
) {
    if let Some((hash, moved)) = timers.disarm(slot)
        && let Some(w) = waiting.get_mut(hash, moved)
    {
        w.slot = slot;
    }
}

/// How many begun milliseconds [`take_begun`] looks at, at most, before the latest.
const MAX_BEGUN: u64 = 8;

/// `d` in whole milliseconds, rounded up, saturating.
fn ceil_ms(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(d.subsec_nanos().div_ceil(1_000_000)))
}

/// A waiting key: its deadline, what it will be added with, its order and its timer.
pub(crate) struct Waiting<K, P> {
    pub(crate) key: K,
    hash: u64,
    pub(crate) at: Instant,
    pub(crate) p: P,
    pub(crate) seq: u64,
    pub(crate) slot: Slot,
}

/// The waiting keys, by key: a dense vector of entries and a hash table of 8-byte slots, each a
/// 32-bit hash and a position.
///
/// The table never reads a key or an entry to grow. Growing a table of whole entries that hashes
/// its keys again (a hashbrown map) read and moved megabytes at random under the queue's lock
/// once 100,000 keys were waiting: one `add_after` held the lock for 6-9 ms with `Arc<str>`
/// keys, and keys due meanwhile fired that much late.
pub(crate) struct WaitingMap<K, P> {
    entries: Vec<Waiting<K, P>>,
    table: HashTable<(u32, u32)>,
    hasher: DefaultHashBuilder,
}

/// The table's 64-bit hash of a 32-bit key hash: a multiplication spreads it over the bits the
/// table reads (the low bits pick the bucket, the top 7 are the tag).
fn spread(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl<K: Hash + Eq, P> WaitingMap<K, P> {
    pub(crate) fn new() -> Self {
        WaitingMap {
            entries: Vec::new(),
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// The hash of `key` that the other methods take (32 bits).
    pub(crate) fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key) & u64::from(u32::MAX)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.table.clear();
    }

    /// Whether the table slot `(h, i)` is `key`'s.
    fn is_slot_of(entries: &[Waiting<K, P>], h: u32, i: u32, hash: u64, key: &K) -> bool {
        u64::from(h) == hash
            && usize::try_from(i)
                .ok()
                .and_then(|i| entries.get(i))
                .is_some_and(|w| w.key == *key)
    }

    pub(crate) fn get(&self, hash: u64, key: &K) -> Option<&Waiting<K, P>> {
        let entries = &self.entries;
        let &(_, i) = self.table.find(spread(hash as u32), |&(h, i)| {
            Self::is_slot_of(entries, h, i, hash, key)
        })?;
        self.entries.get(i as usize)
    }

    pub(crate) fn get_mut(&mut self, hash: u64, key: &K) -> Option<&mut Waiting<K, P>> {
        let entries = &self.entries;
        let &(_, i) = self.table.find(spread(hash as u32), |&(h, i)| {
            Self::is_slot_of(entries, h, i, hash, key)
        })?;
        self.entries.get_mut(i as usize)
    }

    pub(crate) fn remove(&mut self, hash: u64, key: &K) -> Option<Waiting<K, P>> {
        let entries = &self.entries;
        let slot = self
            .table
            .find_entry(spread(hash as u32), |&(h, i)| {
                Self::is_slot_of(entries, h, i, hash, key)
            })
            .ok()?;
        let ((_, i), _) = slot.remove();
        let i = i as usize;
        // `i` is in range: the lookup just read `entries[i]`.
        let removed = self.entries.swap_remove(i);
        if let Some(moved) = self.entries.get(i) {
            // The last entry moved into `i`: point its slot there.
            let last = self.entries.len() as u32;
            if let Some(slot) = self
                .table
                .find_mut(spread(moved.hash as u32), |&(_, j)| j == last)
            {
                slot.1 = i as u32;
            }
        }
        Some(removed)
    }

    /// Whether no other key can wait (positions are 32-bit: 2^32 − 1 keys).
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= u32::MAX as usize
    }

    /// Inserts `key`, which is not waiting (callers check [`is_full`](Self::is_full) first).
    pub(crate) fn insert(&mut self, hash: u64, key: K, at: Instant, p: P, seq: u64, slot: Slot) {
        debug_assert!(!self.is_full(), "callers check that the map has room");
        let i = self.entries.len() as u32;
        self.table
            .insert_unique(spread(hash as u32), (hash as u32, i), |&(h, _)| spread(h));
        self.entries.push(Waiting {
            key,
            hash,
            at,
            p,
            seq,
            slot,
        });
    }

    /// Every waiting key with its hash, to re-arm their timers.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Waiting<K, P>)> {
        self.entries.iter_mut().map(|w| (w.hash, w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    /// Polls `timers` until a millisecond rings.
    async fn next_ring(timers: &mut Timers<&'static str>) -> Due<&'static str> {
        poll_fn(|cx| {
            let due = timers.poll_due(cx, Instant::now());
            if due.due.is_empty() && due.early.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(due)
            }
        })
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn find_grid_finds_tokios_millisecond_grid() {
        // The paused clock starts on tokio's grid; 0.3 ms later the probes start off it.
        let start = Instant::now();
        tokio::time::advance(US * 300).await;
        let grid = find_grid().await.expect("a boundary");
        assert_eq!(grid - start, Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_phase_near_a_whole_millisecond_counts_as_none() {
        let start = Instant::now();
        let mut timers = Timers::<&str>::new();
        timers.align(start + US * 995, PROBE_STEP);
        assert_eq!(timers.phase, Duration::ZERO);
        timers.align(start + US * 700, PROBE_STEP);
        assert_eq!(timers.phase, US * 700);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_of_a_millisecond_that_rang_before_their_deadline_come_apart_and_rearm() {
        // A phase larger than the true one (zero: the timers start on tokio's grid) makes
        // millisecond 1 ring at 1 ms, before a key due at 1.5 ms.
        let start = Instant::now();
        let mut timers = Timers::new();
        timers.align(start + US * 900, PROBE_STEP);
        let deadline = start + US * 1500;
        timers.arm(7, "key", deadline);
        let rang = next_ring(&mut timers).await;
        assert!(Instant::now() < deadline);
        assert_eq!((rang.due, rang.early), (vec![], vec![(7, "key")]));
        // Rearmed, it rings after its deadline (still under the phase's suspicion: callers
        // check the deadline of every early key).
        timers.rearm(7, "key", deadline);
        let rang = next_ring(&mut timers).await;
        assert!(Instant::now() >= deadline);
        assert_eq!([rang.due, rang.early].concat(), vec![(7, "key")]);
    }
}
