//! Reading tokio's clock as a queue's runtime sees it, from any thread.
//!
//! `tokio::time::Instant::now()` reads the clock of the runtime the calling thread is in, and
//! the real clock on a plain thread. Under paused time (tests) the two differ by however far
//! the test has advanced, so a call from a plain thread (a synchronous callback, a helper
//! thread) would stamp its item in the paused clock's past: an hour ahead, a 1 s backoff would
//! be over at once. [`QueueClock`] reads the queue's runtime clock instead.

use std::sync::OnceLock;

use tokio::runtime::Handle;
use tokio::time::Instant;

/// The workspace's one far-future limit, [`ctrlq_queue_core::MAX_DELAY`]: the longest delay
/// honoured by delayed adds (longer delays are clamped to it).
pub use ctrlq_queue_core::MAX_DELAY;

/// A queue's runtime and clock.
///
/// A queue is bound to one runtime: the one it was built in, or, for a queue built outside any
/// runtime, the first one a call of the queue needs (to start a background task, or to read
/// the clock from a plain thread). The binding never changes: the queue's background tasks run
/// there, and a call from a plain thread reads that runtime's clock.
#[derive(Debug)]
pub(crate) struct QueueClock {
    runtime: OnceLock<Handle>,
}

impl QueueClock {
    /// A clock bound to the current runtime, if there is one (else bound later).
    pub(crate) fn new() -> Self {
        let runtime = OnceLock::new();
        if let Ok(current) = Handle::try_current() {
            let _ = runtime.set(current);
        }
        QueueClock { runtime }
    }

    /// Now, by the calling task's runtime; outside any runtime, by the queue's runtime (the
    /// real clock if it is not bound yet).
    pub(crate) fn now(&self) -> Instant {
        self.in_runtime(Instant::now)
    }

    /// Runs `f` (which reads tokio's clock, say a rate limiter) in the calling task's runtime;
    /// outside any runtime, inside the queue's runtime (as is, if it is not bound yet).
    pub(crate) fn in_runtime<R>(&self, f: impl FnOnce() -> R) -> R {
        // Inside a task (the usual caller), `try_id` is a thread-local read; the fallback
        // clones a handle, so it comes second.
        if tokio::task::try_id().is_some() || Handle::try_current().is_ok() {
            return f();
        }
        match self.runtime.get() {
            Some(runtime) => {
                let _in_runtime = runtime.enter();
                f()
            }
            None => f(),
        }
    }

    /// The queue's runtime, binding the queue to the calling thread's runtime if it has none
    /// yet (`None` if neither exists). The runtime may have shut down: a task spawned there
    /// is dropped at once (see [`crate::task`]).
    pub(crate) fn runtime(&self) -> Option<&Handle> {
        if let Some(bound) = self.runtime.get() {
            return Some(bound);
        }
        let current = Handle::try_current().ok()?;
        Some(self.runtime.get_or_init(|| current))
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

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
    }

    fn read_on_a_plain_thread(clock: &QueueClock) -> Instant {
        std::thread::scope(|s| s.spawn(|| clock.now()).join().expect("no panic"))
    }

    #[test]
    fn a_clock_built_outside_a_runtime_binds_to_the_first_that_asks_and_keeps_it() {
        let clock = QueueClock::new();
        assert!(clock.runtime().is_none(), "no runtime anywhere yet");
        let (first, second) = (paused_runtime(), paused_runtime());
        let first_now = first.block_on(async {
            tokio::time::advance(Duration::from_secs(3600)).await;
            assert!(clock.runtime().is_some(), "bound here");
            Instant::now()
        });
        let second_now = second.block_on(async {
            assert!(clock.runtime().is_some());
            Instant::now()
        });
        assert!(second_now < first_now, "the two paused clocks differ");
        assert_eq!(
            read_on_a_plain_thread(&clock),
            first_now,
            "still the first runtime's clock: the binding did not move"
        );
    }
}
