//! Reading tokio's clock as a queue's runtime sees it, from any thread.
//!
//! `tokio::time::Instant::now()` reads the clock of the runtime the calling thread is in, and
//! the real clock on a plain thread. Under paused time (tests) the two differ by however far
//! the test has advanced, so a call from a plain thread (a synchronous callback, a helper
//! thread) would stamp its item in the paused clock's past: an hour ahead, a 1 s backoff would
//! be over at once. [`QueueClock`] reads the queue's runtime clock instead.

use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// The workspace's one far-future limit, [`ctrlq_queue_core::MAX_DELAY`]: the longest delay
/// honoured by delayed adds (longer delays are clamped to it).
pub use ctrlq_queue_core::MAX_DELAY;

/// A queue's clock: the calling runtime's inside one, else the queue's runtime's.
///
/// The queue's runtime is the one it was built in, if any, replaced by the runtime of each
/// background task it starts (the task's timers run on that clock).
#[derive(Debug)]
pub(crate) struct QueueClock {
    runtime: Mutex<Option<Handle>>,
}

impl QueueClock {
    /// A clock on the current runtime, if there is one.
    pub(crate) fn new() -> Self {
        QueueClock {
            runtime: Mutex::new(Handle::try_current().ok()),
        }
    }

    /// Makes `runtime` the queue's runtime (a background task of the queue runs there).
    pub(crate) fn set_runtime(&self, runtime: &Handle) {
        *self.runtime.lock() = Some(runtime.clone());
    }

    /// Now, by the calling task's runtime; outside any runtime, by the queue's runtime (the
    /// real clock if it has none yet).
    pub(crate) fn now(&self) -> Instant {
        self.in_runtime(Instant::now)
    }

    /// Runs `f` (which reads tokio's clock, say a rate limiter) in the calling task's runtime;
    /// outside any runtime, inside the queue's runtime (as is, if it has none yet).
    pub(crate) fn in_runtime<R>(&self, f: impl FnOnce() -> R) -> R {
        // Inside a task (the usual caller), `try_id` is a thread-local read; the fallback
        // clones a handle, so it comes second.
        if tokio::task::try_id().is_some() || Handle::try_current().is_ok() {
            return f();
        }
        match self.queue_runtime() {
            Some(runtime) => {
                let _in_runtime = runtime.enter();
                f()
            }
            None => f(),
        }
    }

    /// The calling thread's runtime, else the queue's (`None` if neither exists).
    pub(crate) fn runtime(&self) -> Option<Handle> {
        Handle::try_current().ok().or_else(|| self.queue_runtime())
    }

    fn queue_runtime(&self) -> Option<Handle> {
        self.runtime.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_plain_thread_reads_the_queue_runtime_paused_clock() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let clock = runtime.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            QueueClock::new()
        });
        let paused = runtime.block_on(async { Instant::now() });
        let read = std::thread::scope(|s| s.spawn(|| clock.now()).join().expect("no panic"));
        assert_eq!(read, paused, "the paused clock, not the real one");
    }
}
