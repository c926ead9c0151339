//! The wait of a [`WorkQueue::stream`](crate::WorkQueue::stream): a `get` that is registered
//! with the queue while it waits, so that every add wakes it.

use std::sync::atomic::{AtomicBool, Ordering};

use ctrlq_queue_core::PopOutcome;
use tokio::sync::Notify;

use super::machine::{Payload, QueueKey};
use super::state::Shared;
use crate::wait::Source;

/// A stream's wait: registered while it waits, so that every add wakes it (a stream that is
/// kept but not polled must not hold a wake-up another consumer needs, as a `get` would).
pub(crate) struct StreamWait<'a, K: QueueKey, P: Payload> {
    shared: &'a Shared<K, P>,
    registered: AtomicBool,
}

impl<'a, K: QueueKey, P: Payload> StreamWait<'a, K, P> {
    pub(crate) fn new(shared: &'a Shared<K, P>) -> Self {
        StreamWait {
            shared,
            registered: AtomicBool::new(false),
        }
    }

    fn register(&self, waiting: bool) {
        if waiting != self.registered.swap(waiting, Ordering::Relaxed) {
            if waiting {
                self.shared.streams_waiting.fetch_add(1, Ordering::SeqCst);
            } else {
                self.shared.streams_waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl<K: QueueKey + 'static, P: Payload> Source for StreamWait<'_, K, P> {
    type Output = Option<(K, P)>;

    fn notify(&self) -> &Notify {
        &self.shared.stream_wake
    }

    fn try_take(&self) -> Option<Option<(K, P)>> {
        // Registered before the look: an add that queues a key after the look reads the
        // queue's count of waiting streams after that key's push (both ordered by the lock the
        // look and the push take), so it sees this stream and wakes it.
        self.register(true);
        let out = match self.shared.try_pop() {
            PopOutcome::Item(out) => Some(Some(out)),
            PopOutcome::ShutDown => Some(None),
            PopOutcome::Empty => None,
        };
        self.register(out.is_none());
        out
    }
}

impl<K: QueueKey, P: Payload> Drop for StreamWait<'_, K, P> {
    fn drop(&mut self) {
        if *self.registered.get_mut() {
            self.shared.streams_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
