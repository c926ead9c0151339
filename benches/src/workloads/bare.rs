//! The floor under `concurrent` and `hotkeys`: the least a work queue behind one lock does.
//!
//! The Go original's algorithm as it stands, in Rust: a FIFO, a dirty set and a processing set
//! (an add of a dirty key does nothing, a key is handed out once at a time, a key added while
//! processing is queued again at `done`), behind one `parking_lot::Mutex` (the lock the work
//! queue uses) with the work queue's hasher, woken with tokio's `Notify` in the pattern of its
//! docs (look; enable; look again; wait), shut down with a flag. It has none of the rest of the
//! work queue: no item guard, no delays, no rate limiter, no metrics, no drain, and it stores
//! each key three times. Whatever a work queue behind one lock does per key, it does at least
//! this, so its rate bounds what such a queue can reach on the same machine.

use std::collections::VecDeque;

use hashbrown::HashSet;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::fifo::Key;

/// The bare queue.
pub(super) struct BareQueue {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    fifo: VecDeque<Key>,
    dirty: HashSet<Key>,
    processing: HashSet<Key>,
    closed: bool,
}

impl BareQueue {
    /// An empty queue.
    pub(super) fn new() -> Self {
        BareQueue {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        }
    }

    /// Marks `key` dirty and queues it unless it was dirty or is processing; wakes one `get` if
    /// it queued it.
    pub(super) fn add(&self, key: &Key) {
        {
            let mut s = self.state.lock();
            if s.dirty.contains(key) {
                return;
            }
            s.dirty.insert(*key);
            if s.processing.contains(key) {
                return;
            }
            s.fifo.push_back(*key);
        }
        self.wake.notify_one();
    }

    /// The next key, now processing, or `None` once closed and empty.
    pub(super) async fn get(&self) -> Option<Key> {
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

    fn try_take(&self) -> Option<Option<Key>> {
        let mut s = self.state.lock();
        match s.fifo.pop_front() {
            Some(key) => {
                s.processing.insert(key);
                s.dirty.remove(&key);
                Some(Some(key))
            }
            None if s.closed => Some(None),
            None => None,
        }
    }

    /// Ends the processing of `key`; queues it again if it was added meanwhile.
    pub(super) fn done(&self, key: &Key) {
        {
            let mut s = self.state.lock();
            s.processing.remove(key);
            if !s.dirty.contains(key) {
                return;
            }
            s.fifo.push_back(*key);
        }
        self.wake.notify_one();
    }

    /// Ends every `get` once the queue is empty (the workloads add nothing after it).
    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.wake.notify_waiters();
    }
}
