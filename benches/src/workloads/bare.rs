//! The floor under `concurrent` and `hotkeys`: the least a queue behind one lock does for them.
//!
//! A FIFO of keys behind one `parking_lot::Mutex` (the lock the work queue uses), woken with
//! tokio's `Notify` in the pattern of its docs (look; enable; look again; wait), shut down with a
//! flag. With `dedup`, a hash set (the work queue's hasher) holds the queued keys and an add of a
//! queued key does nothing. It has none of the rest of a work queue: no processing set, so a
//! key can be in two workers at once and an add while processing is not held back; no `done`,
//! no delays, no metrics, no drain. Whatever a one-lock work queue does, it does at least this
//! per key, so its rate bounds what such a queue can reach on the same machine.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashSet;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// The bare queue.
pub(super) struct BareQueue {
    state: Mutex<State>,
    wake: Notify,
}

struct State {
    fifo: VecDeque<Arc<str>>,
    queued: Option<HashSet<Arc<str>>>,
    closed: bool,
}

impl BareQueue {
    /// An empty queue; with `dedup`, adds of a queued key are coalesced.
    pub(super) fn new(dedup: bool) -> Self {
        BareQueue {
            state: Mutex::new(State {
                fifo: VecDeque::new(),
                queued: dedup.then(HashSet::new),
                closed: false,
            }),
            wake: Notify::new(),
        }
    }

    /// Queues `key` (unless `dedup` and it is queued) and wakes one waiting `get`.
    pub(super) fn add(&self, key: &Arc<str>) {
        {
            let mut s = self.state.lock();
            if let Some(queued) = &mut s.queued {
                if queued.contains(key) {
                    return;
                }
                queued.insert(key.clone());
            }
            s.fifo.push_back(key.clone());
        }
        self.wake.notify_one();
    }

    /// The next key, or `None` once closed and empty.
    pub(super) async fn get(&self) -> Option<Arc<str>> {
        loop {
            if let Some(out) = self.try_take() {
                return out;
            }
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(out) = self.try_take() {
                return out;
            }
            notified.await;
        }
    }

    fn try_take(&self) -> Option<Option<Arc<str>>> {
        let mut s = self.state.lock();
        match s.fifo.pop_front() {
            Some(key) => {
                if let Some(queued) = &mut s.queued {
                    queued.remove(&key);
                }
                Some(Some(key))
            }
            None if s.closed => Some(None),
            None => None,
        }
    }

    /// Refuses nothing (the workloads add nothing after it), and ends every `get` once empty.
    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_waiters();
    }
}
