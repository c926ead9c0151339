//! The unschedulable sub-queue: a map of items waiting for an event (rejected or gated).

use std::hash::Hash;

use hashbrown::HashMap;

use super::item::QueuedItem;

/// Items rejected or gated, by key; guarded by the queue's main lock.
#[derive(Debug)]
pub(crate) struct Unschedulable<K, T> {
    pub(crate) map: HashMap<K, QueuedItem<K, T>>,
}

impl<K, T> Unschedulable<K, T> {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

impl<K: Hash + Eq + Clone, T> Unschedulable<K, T> {
    pub(crate) fn new() -> Self {
        Unschedulable {
            map: HashMap::new(),
        }
    }

    pub(crate) fn insert(&mut self, item: QueuedItem<K, T>) {
        self.map.insert(item.key.clone(), item);
    }

    /// Removes and returns the items `take` selects, in one pass (no re-hashing).
    pub(crate) fn extract(
        &mut self,
        mut take: impl FnMut(&mut QueuedItem<K, T>) -> bool,
    ) -> Vec<QueuedItem<K, T>> {
        self.map
            .extract_if(|_, item| take(item))
            .map(|(_, item)| item)
            .collect()
    }
}
