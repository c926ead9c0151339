//! Hand-outs and their end: a `get` takes a key ([`Source`]), an item or the handle's
//! `done` ends its hand-out, a worker's panic fails it.
//!
//! With one shard, a `get` pops that shard's state machine. With more, it takes the next
//! entry of the hand-out order (a lock held for one `pop_front`) under the lock of the shard
//! the entry names, then pops that shard: keys come out in the order they were queued, and the
//! state machines' work (hashing, the sets) runs under the shards' locks, which workers rarely
//! share.

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
        if self.shards.len() == 1 {
            return self.pop_locked(&mut self.lock(0));
        }
        loop {
            let mut order = self.order.lock();
            let Some(&next) = order.front() else {
                // Set after every shard was shut down, when every key they queued was in the
                // order: nothing is queued that the order does not name.
                return if self.is_shutting_down() {
                    PopOutcome::ShutDown
                } else {
                    PopOutcome::Empty
                };
            };
            let shard = next as usize;
            // An order entry and its shard's key are taken under the shard's lock together,
            // so the entries of one shard are taken in the order its keys were queued, and
            // each `get` gets the key its entry stands for (first in, first out across shards).
            // The shard's lock is only tried here: a blocking wait for it under the order's
            // lock would turn the lock order (a shard's, then the order's) around.
            if let Some(mut state) = self.shards[shard].try_lock() {
                order.pop_front();
                drop(order);
                return self.pop_locked(&mut state);
            }
            drop(order);
            let mut state = self.lock(shard);
            let mut order = self.order.lock();
            if order.front() == Some(&next) {
                order.pop_front();
                drop(order);
                return self.pop_locked(&mut state);
            }
            // Another `get` took that entry meanwhile: look again.
        }
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
        let shard = self.shard_of(key);
        self.with_lock(shard, |state, wake| {
            self.finish_locked(shard, state, key, wake);
        });
    }

    /// The handles' `done`: ends the hand-out of `key` if it was taken out of its item with
    /// `into_key` and not done since. Ignored otherwise: a key not processing, already done, or
    /// held by an item (whose own drop ends it).
    pub(crate) fn done(&self, key: &K) {
        let shard = self.shard_of(key);
        self.with_lock(shard, |state, wake| {
            if state.detached.remove(key) {
                self.finish_locked(shard, state, key, wake);
            } else {
                debug!(queue = %self.name, "done for a key not taken out of its item; ignored");
            }
        });
    }

    /// `key`'s item gave up its hand-out (`into_key`): the handles' `done` ends it now.
    pub(crate) fn detach(&self, key: &K) {
        self.lock(self.shard_of(key)).detached.insert(key.clone());
    }

    fn finish_locked(&self, shard: usize, state: &mut State<K, P>, key: &K, wake: &mut Wake) {
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
            DoneOutcome::Requeued(_) => self.queued(shard, state, wake),
            DoneOutcome::Finished | DoneOutcome::NotProcessing => self.note_busy(state, wake),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::WorkQueue;

    /// The hand-out order names exactly the queued keys' shards with several shards, and is
    /// never written with one (a `get` of a one-shard queue does not read it).
    #[test]
    fn the_order_holds_one_entry_per_queued_key_and_only_with_several_shards() {
        for shards in [1, 4] {
            let queue: WorkQueue<u32> = WorkQueue::builder().shards(shards).build();
            let inner = Arc::clone(&queue.inner);
            for k in 0..64 {
                queue.add(k % 40).unwrap();
            }
            let mut held = Vec::new();
            for _ in 0..10 {
                let mut get = tokio_test::task::spawn(queue.get());
                let std::task::Poll::Ready(Some(item)) = get.poll() else {
                    panic!("a key is queued");
                };
                held.push(item);
            }
            // Added again while processed: queued again by `done`.
            for item in &held {
                queue.add(*item.key()).unwrap();
            }
            drop(held);
            let expected = if shards == 1 { 0 } else { queue.len() };
            assert_eq!(queue.len(), 40, "{shards} shards");
            assert_eq!(inner.order.lock().len(), expected, "{shards} shards");
            let order = inner.order.lock();
            assert!(order.iter().all(|&s| (s as usize) < shards), "{order:?}");
        }
    }
}
