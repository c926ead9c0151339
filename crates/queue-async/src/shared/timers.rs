//! The keys waiting for a deadline, each with its own timer in one
//! `tokio_util::time::DelayQueue`: a map from key to its wait (deadline, payload and the
//! `DelayQueue` key of its timer), as kube-runtime's `scheduler.rs`.
//!
//! The map and the timers live under the queue's timers lock: a delayed add sets its timer
//! directly, and `DelayQueue` wakes the delay task when that timer is earlier than the one it
//! sleeps on. The delay task takes what is due with [`Timers::poll_due`].

use std::cmp::Reverse;
use std::hash::Hash;
use std::task::{Context, Poll};

use hashbrown::HashMap;
use tokio::time::Instant;
use tokio_util::time::{DelayQueue, delay_queue};

use super::machine::Payload;

/// The waiting keys and their timers.
pub(crate) struct Timers<K, P> {
    waiting: HashMap<K, Waiting<P>>,
    /// One timer per waiting key. Its `Sleep` belongs to the delay task's runtime: every call
    /// that may set it runs inside that runtime's context.
    timers: DelayQueue<K>,
    /// The order of delayed adds, to break ties between keys due at the same instant with the
    /// same payload (see [`Payload::TIES_BY_ADD_COUNTER`]).
    seq: u64,
}

/// One key's wait.
struct Waiting<P> {
    at: Instant,
    p: P,
    seq: u64,
    timer: delay_queue::Key,
}

/// A due key with what orders it among the keys due with it.
type Due<K, P> = (Instant, Reverse<P>, u64, K);

impl<K: Hash + Eq + Clone, P: Payload> Timers<K, P> {
    pub(crate) fn new() -> Self {
        Timers {
            waiting: HashMap::new(),
            timers: DelayQueue::new(),
            seq: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Makes `key` wait until `at`, keeping an earlier deadline it already has and the higher of
    /// the two payloads. Call inside the delay task's runtime.
    pub(crate) fn wait_until(&mut self, key: K, p: P, at: Instant) {
        self.seq += 1;
        if let Some(w) = self.waiting.get_mut(&key) {
            let (raised, moved) = (p > w.p, at < w.at);
            if raised {
                w.p = p;
            }
            if moved {
                w.at = at;
                self.timers.reset_at(&w.timer, at);
            }
            if (P::TIES_BY_ADD_COUNTER && raised) || (!P::TIES_BY_ADD_COUNTER && moved) {
                w.seq = self.seq;
            }
            return;
        }
        let timer = self.timers.insert_at(key.clone(), at);
        let seq = self.seq;
        self.waiting.insert(key, Waiting { at, p, seq, timer });
    }

    /// Ends `key`'s wait, if it waits, and returns its payload. Call inside the delay task's
    /// runtime (removing a timer may set the `DelayQueue`'s sleep anew).
    pub(crate) fn cancel(&mut self, key: &K) -> Option<P> {
        let w = self.waiting.remove(key)?;
        self.timers.remove(&w.timer);
        Some(w.p)
    }

    /// Takes every key whose timer rang, ordered by deadline, then higher payload, then the
    /// order of their delayed adds; `cx` is woken at the next timer (or when an add sets an
    /// earlier one). Call from the delay task.
    pub(crate) fn poll_due(&mut self, cx: &mut Context<'_>) -> Vec<(K, P)> {
        let mut due: Vec<Due<K, P>> = Vec::new();
        while let Poll::Ready(Some(expired)) = self.timers.poll_expired(cx) {
            let key = expired.into_inner();
            // Every timer belongs to a waiting key: `cancel` and `clear` remove both.
            if let Some(w) = self.waiting.remove(&key) {
                due.push((w.at, Reverse(w.p), w.seq, key));
            }
        }
        sorted(due)
    }

    /// Takes every key whose deadline is at or before `now`, in the order of
    /// [`poll_due`](Self::poll_due), whether or not its timer has rung. Call inside the delay
    /// task's runtime.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<(K, P)> {
        let keys: Vec<K> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut due = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(w) = self.waiting.remove(&key) {
                self.timers.remove(&w.timer);
                due.push((w.at, Reverse(w.p), w.seq, key));
            }
        }
        sorted(due)
    }

    /// Starts the timers on the calling runtime's clock: a `DelayQueue` measures its deadlines
    /// from the instant it was made, which must be read from the runtime that times them (a
    /// queue built on a plain thread would otherwise start from the real clock). Call inside
    /// the delay task's runtime before the first key waits.
    pub(crate) fn start_here(&mut self) {
        debug_assert!(
            self.waiting.is_empty(),
            "no key waits before the delay task runs"
        );
        self.timers = DelayQueue::new();
    }

    /// Takes every waiting key, ordered as [`poll_due`](Self::poll_due) orders the keys due
    /// together, and drops their timers (their runtime is gone).
    pub(crate) fn take_all(&mut self) -> Vec<(K, P)> {
        let due = self
            .waiting
            .drain()
            .map(|(key, w)| (w.at, Reverse(w.p), w.seq, key))
            .collect();
        self.timers = DelayQueue::new();
        sorted(due)
    }

    /// Drops every waiting key and its timer.
    pub(crate) fn clear(&mut self) {
        self.waiting = HashMap::new();
        self.timers = DelayQueue::new();
    }
}

fn sorted<K, P: Ord>(mut due: Vec<Due<K, P>>) -> Vec<(K, P)> {
    due.sort_unstable_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    due.into_iter()
        .map(|(_, Reverse(p), _, k)| (k, p))
        .collect()
}
