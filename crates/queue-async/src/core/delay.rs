//! The delay task: it polls the queue's timers, so that keys whose delay is over are added at
//! their deadline, and ends when the queue shuts down or its last handle is dropped.
//!
//! The timers (a `tokio_util::time::DelayQueue`) live in the queue's state, under its lock:
//! `add_after` sets a key's timer there directly, and `DelayQueue` wakes this task when a new
//! timer is earlier than the one it sleeps on. The task wakes exactly at the next deadline; it
//! never polls on a heartbeat, and no channel stands between producers and the timers.

use std::future::poll_fn;
use std::hash::Hash;
use std::sync::Weak;
use std::task::{Context, Poll};
use std::time::Duration;

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use tokio::sync::{mpsc, oneshot};
use tokio::task::unconstrained;
use tokio::time::Instant;
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
        loop {
            tokio::select! {
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
pub(crate) struct Timers<K> {
    queue: DelayQueue<u64>,
    origin: Instant,
    ticks: HashMap<u64, Tick<K>>,
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
            ticks: HashMap::new(),
        }
    }

    /// The first millisecond of the grid at or after `deadline`.
    fn tick_of(&self, deadline: Instant) -> u64 {
        let d = deadline.saturating_duration_since(self.origin);
        d.as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(d.subsec_nanos().div_ceil(1_000_000)))
    }

    /// Sets a timer for `key` (whose hash in the waiting map is `hash`) at `deadline`. Callers
    /// enter the delay task's runtime: a new `DelayQueue` entry may create a `Sleep`.
    pub(crate) fn arm(&mut self, hash: u64, key: K, deadline: Instant) -> Slot {
        let tick = self.tick_of(deadline);
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
    pub(crate) fn poll_due(&mut self, cx: &mut Context<'_>) -> Vec<(u64, K)> {
        let mut due = Vec::new();
        while let Poll::Ready(Some(expired)) = self.queue.poll_expired(cx) {
            if let Some(tick) = self.ticks.remove(&expired.into_inner()) {
                due.extend(tick.keys);
            }
        }
        due
    }
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
