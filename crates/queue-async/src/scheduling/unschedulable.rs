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

    /// Removes the items `take` selects, lazily: each is taken out as the iterator reaches it,
    /// and items not yet reached stay if the iterator is dropped.
    pub(crate) fn extract<'a>(
        &'a mut self,
        mut take: impl FnMut(&mut QueuedItem<K, T>) -> bool + 'a,
    ) -> impl Iterator<Item = QueuedItem<K, T>> + 'a {
        self.map
            .extract_if(move |_, item| take(item))
            .map(|(_, item)| item)
    }
}
