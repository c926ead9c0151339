//! The keys of a work or priority queue that wait for their delay: each with its exact
//! deadline, in a keyed heap of the keys by their wait (deadline, then priority, then order of
//! add), the order in which keys due together are added. The deadlines are the keys' own, not
//! rounded to a grid of the queue's: tokio's timer rounds the queue's one sleep up to its
//! millisecond tick, and the keys due when it rings are taken by the clock, so a key is as late
//! as tokio's timer alone makes it.
//!
//! When many keys are due at once (a busy second of delayed adds has ~100 per millisecond), the
//! timer's task takes them [`CHUNK`] at a time, waking the getters and letting go of the lock
//! after each chunk, and runs again at once for the rest: the first keys are handed out while
//! the later ones are still being added, instead of every key of the tick waiting for the last
//! one to be added. Keys due at the same instant are always taken in one chunk, so their order
//! among themselves (priority, then order of add) is the order they are handed out in.

use std::cmp::Reverse;
use std::hash::Hash;

use ctrlq_queue_core::KeyedHeap;
use tokio::time::Instant;

/// The keys the timer's task takes at one poll, at the least: it takes at most this many, and
/// then every key due at the same instant as the last of them.
pub(super) const CHUNK: usize = 32;

/// The waiting keys and their deadlines, under the queue's lock.
pub(super) struct Waiting<K> {
    /// Every waiting key with its wait, in the order they are due.
    heap: KeyedHeap<K, Wait>,
    /// Numbers the delayed adds: the order that breaks ties between keys due at the same
    /// instant with the same priority (see [`Machine::has_priority`](super::Machine::has_priority)).
    seq: u64,
    ties_by_add_counter: bool,
}

/// One key's wait: its deadline, then its priority (higher first), then the number of the
/// delayed add that orders it among the keys due with it. Every key's number is its own, so
/// the order of the waiting keys is total, and the last field, whether the wait is a failure's
/// backoff (a rate-limited add), never decides it.
type Wait = (Instant, Reverse<i32>, u64, bool);

impl<K: Hash + Eq + Clone> Waiting<K> {
    pub(super) fn new(ties_by_add_counter: bool) -> Self {
        Waiting {
            heap: KeyedHeap::default(),
            seq: 0,
            ties_by_add_counter,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|(_, &(at, ..))| at)
    }

    /// Makes `key` wait until `at`, keeping an earlier deadline it already has and the higher
    /// of the two priorities; `true` if `at` is now its deadline. The wait is a backoff if
    /// `backoff` is or it already was.
    pub(super) fn wait_until(&mut self, key: K, priority: i32, at: Instant, backoff: bool) -> bool {
        self.seq += 1;
        let (seq, ties_by_add_counter) = (self.seq, self.ties_by_add_counter);
        let mut moved = true;
        let waits = self
            .heap
            .update(&key, |(w_at, Reverse(w_priority), w_seq, w_backoff)| {
                *w_backoff |= backoff;
                let raised = priority > *w_priority;
                moved = at < *w_at;
                if raised {
                    *w_priority = priority;
                }
                if moved {
                    *w_at = at;
                }
                if (ties_by_add_counter && raised) || (!ties_by_add_counter && moved) {
                    *w_seq = seq;
                }
            });
        if !waits {
            self.heap.add(key, (at, Reverse(priority), seq, backoff));
        }
        moved
    }

    /// Ends `key`'s wait, if it waits, and returns its priority.
    pub(super) fn cancel(&mut self, key: &K) -> Option<i32> {
        let (_, (_, Reverse(priority), ..)) = self.heap.delete(key)?;
        Some(priority)
    }

    /// Raises the priority of `key`'s wait to `priority` if it waits out a backoff; `true` if
    /// it does.
    pub(super) fn raise_backoff(&mut self, key: &K, priority: i32) -> bool {
        let Some(&(at, _, _, true)) = self.heap.get(key) else {
            return false;
        };
        self.wait_until(key.clone(), priority, at, true);
        true
    }

    /// Takes the keys whose deadline is at or before `now`, ordered by deadline, then higher
    /// priority, then the order of their delayed adds: `limit` of them, and then those due at
    /// the same instant as the last one taken.
    pub(super) fn take_due(&mut self, now: Instant, limit: usize) -> Vec<(K, i32)> {
        let mut due = Vec::new();
        let mut last = None;
        while let Some(at) = self.next_deadline() {
            if at > now || (due.len() >= limit && last != Some(at)) {
                break;
            }
            let Some((key, (_, Reverse(priority), ..))) = self.heap.pop() else {
                break;
            };
            due.push((key, priority));
            last = Some(at);
        }
        due
    }

    /// Drops every waiting key (the queue shuts down).
    pub(super) fn clear(&mut self) {
        self.heap = KeyedHeap::default();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{CHUNK, Waiting};

    #[test]
    fn many_due_keys_come_a_chunk_at_a_time_and_keys_due_together_stay_together() {
        let mut waiting = Waiting::new(false);
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        // A chunk and 4 more keys due one after another, then 25 due at one instant.
        let spread = CHUNK as u64 + 4;
        for i in 0..spread {
            waiting.wait_until(i, 0, ms(i + 1), false);
        }
        for i in spread..spread + 25 {
            waiting.wait_until(i, 0, ms(spread + 1), false);
        }
        let first = waiting.take_due(ms(1000), CHUNK);
        assert_eq!(first.len(), CHUNK);
        assert!(
            waiting.next_deadline() <= Some(ms(1000)),
            "more keys are due"
        );
        // The next chunk reaches into the keys due together and takes all of them.
        let second = waiting.take_due(ms(1000), CHUNK);
        assert_eq!(second.len(), 4 + 25);
        assert_eq!(waiting.next_deadline(), None, "nothing more is due");
        let order: Vec<u64> = first.into_iter().chain(second).map(|(k, _)| k).collect();
        assert_eq!(order, (0..spread + 25).collect::<Vec<_>>());
        assert_eq!(waiting.len(), 0);
        // Only what is due: nothing before the first deadline, then that key alone.
        waiting.wait_until(50, 0, ms(2000), false);
        waiting.wait_until(51, 0, ms(3000), false);
        assert_eq!(waiting.take_due(ms(1999), 1), vec![]);
        assert_eq!(waiting.take_due(ms(2500), 1), vec![(50, 0)]);
        assert_eq!(
            waiting.next_deadline(),
            Some(ms(3000)),
            "nothing more is due"
        );
    }
}
