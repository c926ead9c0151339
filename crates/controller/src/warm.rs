//! The warm view: every key a replica's sources yielded, kept for the whole run whether the
//! replica leads or follows, so that a term (or a shard's term) starts with its queue filled
//! from it instead of subscribing the sources again.
//!
//! The replica's pumps add into the view once per run. The view keeps each key in the set of
//! its shard (one shard, 0, without sharding) and sends it on to the queue attached for that
//! shard, if any. Attaching a queue fills it with the shard's keys and routes the shard's later
//! keys to it under one lock, so a key yielded meanwhile is in the fill or sent on, never
//! neither.
//!
//! # Memory
//!
//! One entry of a `HashSet<K>` per distinct key: `size_of::<K>()` + 1 bytes, times 8/7 to
//! 16/7 for the table's spare capacity, plus what the key owns on the heap (a `String`'s
//! text). A key stays until the run ends, its object's deletion included: a source yields a
//! deleted object's key like any other, and a follower reconciles nothing, so the view is never
//! told that a key is gone. The cost: the view grows with every key yielded during the run, and
//! a term starts with the deleted keys too, each reconciled once more (finding the object gone).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ctrlq_queue_async::PriorityQueue;
use parking_lot::Mutex;

use crate::key::Key;
use crate::priority::{LOW, Queued};
use crate::source::Sink;

/// The shard of a key, as [`shard_of`](crate::shard::shard_of) computes it for the
/// controller's shard count.
pub(crate) type ShardFn<K> = Arc<dyn Fn(&K) -> u32 + Send + Sync>;

/// A replica's warm view of its sources' keys, by shard, and the queues of the terms it runs.
pub(crate) struct WarmView<K: Key> {
    /// The shard of a key; `None` without sharding (every key in shard 0).
    shard_of: Option<ShardFn<K>>,
    state: Mutex<State<K>>,
}

struct State<K: Key> {
    /// Every key the sources yielded, by shard.
    keys: HashMap<u32, HashSet<K>>,
    /// The queue of each shard's running term.
    queues: HashMap<u32, PriorityQueue<K>>,
}

impl<K: Key> WarmView<K> {
    /// A view by shard, `shard_of` telling each key's; without it, a view of one shard (a
    /// controller with one lease).
    pub(crate) fn new(shard_of: Option<ShardFn<K>>) -> Self {
        Self {
            shard_of,
            state: Mutex::new(State {
                keys: HashMap::new(),
                queues: HashMap::new(),
            }),
        }
    }

    fn shard(&self, key: &K) -> u32 {
        self.shard_of.as_ref().map_or(0, |f| f(key))
    }

    /// Fills `queue` with `shard`'s keys, at [`LOW`] priority, and sends it the shard's keys
    /// from now on, each at the priority its source gave it; returns how many keys it was
    /// filled with.
    pub(crate) fn attach(&self, shard: u32, queue: PriorityQueue<K>) -> usize {
        let mut state = self.state.lock();
        let filled = state.keys.get(&shard).map_or(0, |keys| {
            // Refused only by a queue already shut down: its term is over.
            let _ = queue.add_all_with_priority(keys.iter().map(|k| (k.clone(), LOW)));
            keys.len()
        });
        state.queues.insert(shard, queue);
        filled
    }

    /// Stops sending `shard`'s keys anywhere; the view keeps them.
    pub(crate) fn detach(&self, shard: u32) {
        self.state.lock().queues.remove(&shard);
    }

    /// How many keys the view holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().keys.values().map(HashSet::len).sum()
    }
}

impl<K: Key> Sink<K> for Arc<WarmView<K>> {
    fn add(&self, keys: &mut Vec<Queued<K>>) -> bool {
        let mut state = self.state.lock();
        let State { keys: view, queues } = &mut *state;
        for Queued { key, priority } in keys.drain(..) {
            let shard = self.shard(&key);
            if let Some(queue) = queues.get(&shard) {
                // Refused only once the term's queue shuts down: the view keeps the key.
                let _ = queue.add_with_priority(key.clone(), priority);
            }
            view.entry(shard).or_default().insert(key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued<K, const N: usize>(keys: [K; N]) -> Vec<Queued<K>> {
        keys.into_iter().map(Queued::from).collect()
    }

    #[tokio::test]
    async fn a_fill_is_low_and_a_sent_key_keeps_its_priority() {
        let view = Arc::new(WarmView::new(None));
        view.add(&mut queued(["listed"]));
        let queue = PriorityQueue::new();
        view.attach(0, queue.clone());
        view.add(&mut vec![Queued::new("changed", 5)]);
        let first = queue.get().await.unwrap();
        assert_eq!((*first.key(), first.priority()), ("changed", 5));
        let second = queue.get().await.unwrap();
        assert_eq!((*second.key(), second.priority()), ("listed", LOW));
    }

    #[tokio::test]
    async fn a_queue_attached_is_filled_then_sent_its_shards_keys_only() {
        let view = Arc::new(WarmView::new(Some(Arc::new(|k: &u32| k % 2))));
        view.add(&mut queued([1, 2, 3, 3]));
        assert_eq!(view.len(), 3);
        let odd = PriorityQueue::new();
        assert_eq!(view.attach(1, odd.clone()), 2);
        view.add(&mut queued([4, 5, 7]));
        assert_eq!(odd.len(), 4, "1 and 3 filled, 5 and 7 sent on");
        view.detach(1);
        view.add(&mut queued([9]));
        assert_eq!(odd.len(), 4);
        assert_eq!(view.len(), 7);
    }

    #[tokio::test]
    async fn without_shards_every_key_goes_to_the_one_queue() {
        let view = Arc::new(WarmView::new(None));
        view.add(&mut queued(["a", "b"]));
        let queue = PriorityQueue::new();
        assert_eq!(view.attach(0, queue.clone()), 2);
        view.add(&mut queued(["b", "c"]));
        assert_eq!(queue.len(), 3, "b is queued once");
        queue.shut_down();
        view.add(&mut queued(["d"]));
        assert_eq!(view.len(), 4, "kept after the queue shut down");
    }
}
