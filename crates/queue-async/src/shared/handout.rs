//! Hand-outs and their end: a `get` takes a key ([`Source`]), an item or the handle's
//! `done` ends its hand-out, a worker's panic fails it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ctrlq_queue_core::{DoneOutcome, PopOutcome};
use tokio::sync::Notify;
use tracing::debug;

use super::machine::{Machine, Payload, QueueKey};
use super::state::{Shared, State, Wake};
use crate::wait::Source;

impl<K: QueueKey + 'static, P: Payload> Shared<K, P> {
    /// Hands out the next key, `Empty` to wait, or `ShutDown` once shut down and empty.
    pub(super) fn try_pop(&self) -> PopOutcome<(K, P)> {
        self.pop_locked(&mut self.lock())
    }

    fn pop_locked(&self, state: &mut State<K, P>) -> PopOutcome<(K, P)> {
        let out = state.machine.pop();
        if let PopOutcome::Item((key, p)) = &out
            && state.recorder.is_enabled()
        {
            let priority = <P::Machine<K> as Machine<K>>::metric_priority(*p);
            state.recorder.get_at_priority(key, priority, &self.clock);
            self.in_progress.fetch_add(1, Ordering::SeqCst);
        }
        out
    }

    /// Ends the hand-out of `key` held by an item: called by that item only (its drop or a
    /// consuming method), once, so it ends that hand-out and no later one. Queued again now if
    /// the key was added while processing.
    pub(crate) fn done_item(&self, key: &K) {
        self.with_lock(|state, wake| self.finish_locked(state, key, wake));
    }

    /// The handles' `done`: ends the hand-out of `key` if it was taken out of its item with
    /// `into_key` and not done since. Ignored otherwise: a key not processing, already done, or
    /// held by an item (whose own drop ends it).
    pub(crate) fn done(&self, key: &K) {
        self.with_lock(|state, wake| {
            if state.detached.remove(key) {
                self.finish_locked(state, key, wake);
            } else {
                debug!(queue = %self.name, "done for a key not taken out of its item; ignored");
            }
        });
    }

    /// `key`'s item gave up its hand-out (`into_key`): the handles' `done` ends it now.
    pub(crate) fn detach(&self, key: &K) {
        self.lock().detached.insert(key.clone());
    }

    fn finish_locked(&self, state: &mut State<K, P>, key: &K, wake: &mut Wake) {
        if state.recorder.done(key, &self.clock)
            && self.in_progress.fetch_sub(1, Ordering::SeqCst) == 1
        {
            // Nothing in progress: the gauges read 0 now rather than at the next refresh,
            // which never comes once the queue is shut down.
            state.recorder.zero_unfinished_work();
        }
        let now = self.now_nanos();
        match state.machine.done(key, now) {
            // Counted by the metrics when it became dirty, not again here (as the original).
            DoneOutcome::Requeued(_) => self.queued(wake),
            DoneOutcome::Finished | DoneOutcome::NotProcessing => self.note_idle(state, wake),
        }
    }

    /// A worker panicked holding `key` in an item: adds it back rate limited (a failure), then
    /// ends the item's hand-out. After shutdown the add is refused and the hand-out only ended.
    pub(crate) fn requeue_after_panic(self: &Arc<Self>, key: K, p: P) {
        debug!(queue = %self.name, "a worker panicked holding a key; requeued rate limited");
        let _ = self.add_rate_limited(key.clone(), p);
        self.done_item(&key);
    }
}

/// `get`: one waiting `get` per queued key is woken.
impl<K: QueueKey + 'static, P: Payload> Source for Shared<K, P> {
    type Output = Option<(K, P)>;

    fn notify(&self) -> &Notify {
        &self.get_wake
    }

    fn try_take(&self) -> Option<Option<(K, P)>> {
        match self.try_pop() {
            PopOutcome::Item(out) => Some(Some(out)),
            PopOutcome::ShutDown => Some(None),
            PopOutcome::Empty => None,
        }
    }
}
