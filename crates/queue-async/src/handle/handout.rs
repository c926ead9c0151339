//! Hand-outs and their end: a `get` or a stream takes a key, an item or the handle's `done`
//! ends its hand-out, a worker's panic fails it; shutdown, which ends the hand-outs to come,
//! and the wait of `shut_down_with_drain`.

use std::sync::atomic::{AtomicBool, Ordering};

use ctrlq_queue_core::PopOutcome;
use tokio::sync::Notify;
use tracing::debug;

use std::time::Duration;

use super::{Core, Handle, QueueKey, State, Wake};
use crate::error::AddError;
use crate::item::ItemQueue;
use crate::wait::Source;

impl<K: QueueKey + 'static, M: Core<K>> Handle<K, M> {
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

    fn finish_locked(&self, state: &mut State<K, M>, key: &K, wake: &mut Wake) {
        if state.recorder.is_enabled() {
            state.recorder.done(key, &self.clock);
        }
        if state.machine.done(key, self.now_nanos()) {
            // Counted by the metrics when it became dirty, not again here (as the original).
            wake.getters += 1;
        } else if state.machine.is_idle() {
            // The last hand-out may have ended: a drain is woken.
            wake.idle = self.draining.load(Ordering::SeqCst);
        }
    }

    /// Shuts down: adds refused, waiting keys and their timers dropped, the timer task
    /// stopped, every waiting `get` and stream woken. With `drain`, a drain starts.
    pub(crate) fn shut_down(&self, drain: bool) {
        self.draining.store(drain, Ordering::SeqCst);
        let first = {
            let mut state = self.lock();
            // Waiting keys are never added now: drop them, their timers and the timer task.
            state.timers.clear();
            state.task.stop();
            state.refresh = None;
            state.machine.shut_down()
        };
        self.shutting_down.store(true, Ordering::Release);
        if first {
            debug!(queue = %self.name, drain, "shutting down");
        }
        crate::count::wake();
        self.get_wake.notify_waiters();
        crate::count::wake();
        self.stream_wake.notify_waiters();
        if !drain {
            // A forced shutdown cuts a drain short.
            self.idle_wake.notify_waiters();
        }
    }

    /// Waits until a drain is over: idle, or cut short by a forced shutdown.
    pub(crate) async fn wait_drained(&self) {
        loop {
            let idle = self.idle_wake.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.draining.load(Ordering::SeqCst) || self.lock().machine.is_idle() {
                return;
            }
            idle.await;
        }
    }
}

/// What an item and its `get` call: the hand-out's end is written here, the adds are the
/// handle's.
impl<K: QueueKey + 'static, M: Core<K>> ItemQueue<K> for Handle<K, M> {
    /// Ends the hand-out of `key` held by an item: called by that item only (its drop or a
    /// consuming method), once, so it ends that hand-out and no later one. Queued again now if
    /// the key was added while processing.
    fn done_item(&self, key: &K) {
        self.with_lock(|state, wake| self.finish_locked(state, key, wake));
    }

    /// `key`'s item gave up its hand-out (`into_key`): the handles' `done` ends it now.
    fn detach(&self, key: &K) {
        self.lock().detached.insert(key.clone());
    }

    /// A worker panicked holding `key` in an item: adds it back rate limited (a failure), then
    /// ends the item's hand-out. After shutdown the add is refused and the hand-out only ended.
    fn requeue_after_panic(&self, key: K, priority: i32) {
        debug!(queue = %self.name, "a worker panicked holding a key; requeued rate limited");
        let _ = Handle::add_rate_limited(self, key.clone(), priority);
        self.done_item(&key);
    }

    fn forget(&self, key: &K) {
        Handle::forget(self, key);
    }

    fn add_ref(&self, key: &K, priority: i32) -> Result<(), AddError<K>> {
        Handle::add_ref(self, key, priority)
    }

    fn add_after(&self, key: K, priority: i32, delay: Duration) -> Result<(), AddError<K>> {
        Handle::add_after(self, key, priority, delay)
    }

    fn add_rate_limited(&self, key: K, priority: i32) -> Result<(), AddError<K>> {
        Handle::add_rate_limited(self, key, priority)
    }
}

/// `get`: one waiting `get` per queued key is woken.
impl<K: QueueKey + 'static, M: Core<K>> Source for Handle<K, M> {
    type Output = Option<(K, i32)>;

    fn notify(&self) -> &Notify {
        &self.get_wake
    }

    /// Hands out the next key: `Some(Some(_))`, `Some(None)` once shut down and empty, or
    /// `None` to wait.
    fn try_take(&self) -> Option<Option<(K, i32)>> {
        let mut state = self.lock();
        match state.machine.pop() {
            PopOutcome::Item((key, priority)) => {
                crate::count::hand_out();
                if state.recorder.is_enabled() {
                    let label = M::HAS_PRIORITY.then_some(priority);
                    state.recorder.get_at_priority(&key, label, &self.clock);
                }
                Some(Some((key, priority)))
            }
            PopOutcome::ShutDown => Some(None),
            PopOutcome::Empty => None,
        }
    }
}

/// A stream's wait: registered while it waits, so that every add wakes it (a stream that is
/// kept but not polled must not hold a wake-up another consumer needs, as a `get` would).
pub(crate) struct StreamWait<'a, K: QueueKey, M> {
    handle: &'a Handle<K, M>,
    registered: AtomicBool,
}

impl<'a, K: QueueKey, M> StreamWait<'a, K, M> {
    pub(crate) fn new(handle: &'a Handle<K, M>) -> Self {
        StreamWait {
            handle,
            registered: AtomicBool::new(false),
        }
    }

    fn register(&self, waiting: bool) {
        if waiting != self.registered.swap(waiting, Ordering::Relaxed) {
            if waiting {
                self.handle.streams_waiting.fetch_add(1, Ordering::SeqCst);
            } else {
                self.handle.streams_waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl<K: QueueKey + 'static, M: Core<K>> Source for StreamWait<'_, K, M> {
    type Output = Option<(K, i32)>;

    fn notify(&self) -> &Notify {
        &self.handle.stream_wake
    }

    fn try_take(&self) -> Option<Option<(K, i32)>> {
        // Registered before the look: an add that queues a key after the look reads the
        // queue's count of waiting streams after that key's push (both ordered by the lock the
        // look and the push take), so it sees this stream and wakes it.
        self.register(true);
        let out = Source::try_take(self.handle);
        self.register(out.is_none());
        out
    }
}

impl<K: QueueKey, M> Drop for StreamWait<'_, K, M> {
    fn drop(&mut self) {
        if *self.registered.get_mut() {
            self.handle.streams_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
