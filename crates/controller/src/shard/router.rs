//! A sharded replica's router: the replica's sources pump into it once, and it sends each key to
//! the queue of its shard's term while this replica holds that shard.

use std::collections::HashMap;
use std::sync::Arc;

use ctrlq_queue_async::WorkQueue;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;

use crate::key::Key;
use crate::source::Sink;

/// The shard of a key, as [`shard_of`](super::shard_of) computes it for the controller's shard
/// count.
pub(crate) type ShardFn<K> = Arc<dyn Fn(&K) -> u32 + Send + Sync>;

pub(crate) struct Router<K: Key> {
    shard_of: ShardFn<K>,
    queues: Mutex<HashMap<u32, WorkQueue<K>>>,
    /// Bumped when a shard's term attaches: the pumps subscribe their sources again, so the new
    /// shard gets the keys the sources list.
    relist: watch::Sender<u64>,
}

impl<K: Key> Router<K> {
    pub(crate) fn new(shard_of: ShardFn<K>) -> Self {
        Self {
            shard_of,
            queues: Mutex::new(HashMap::new()),
            relist: watch::Sender::new(0),
        }
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<u32, WorkQueue<K>>> {
        self.queues.lock()
    }

    /// Sends `shard`'s keys to `queue` from now on, and asks the sources to list again.
    pub(crate) fn attach(&self, shard: u32, queue: WorkQueue<K>) {
        self.queues().insert(shard, queue);
        self.relist.send_modify(|n| *n += 1);
    }

    /// Stops sending `shard`'s keys anywhere.
    pub(crate) fn detach(&self, shard: u32) {
        self.queues().remove(&shard);
    }
}

impl<K: Key> Sink<K> for &Router<K> {
    fn add(&self, keys: &mut Vec<K>) -> bool {
        let queues = self.queues();
        for key in keys.drain(..) {
            // Keys of shards this replica does not hold are another replica's.
            if let Some(queue) = queues.get(&(self.shard_of)(&key)) {
                let _ = queue.add(key);
            }
        }
        true
    }

    fn relists(&self) -> Option<watch::Receiver<u64>> {
        Some(self.relist.subscribe())
    }
}

impl<K: Key> Sink<K> for Arc<Router<K>> {
    fn add(&self, keys: &mut Vec<K>) -> bool {
        (&**self).add(keys)
    }

    fn relists(&self) -> Option<watch::Receiver<u64>> {
        (&**self).relists()
    }
}
