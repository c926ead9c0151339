//! A governor [`Clock`] that reads tokio's (pausable) clock, with a per-call override.
//!
//! governor's default clocks (quanta, `std::time::Instant`) and its `until_ready` futures ignore
//! `tokio::time::pause()`. [`TokioClock`] reads `tokio::time::Instant::now()` instead, so paused
//! tests drive the buckets. It deliberately does not implement governor's `ReasonablyRealtime`,
//! so nobody can call `until_ready` (which sleeps on the wall clock) on our limiters.
//!
//! The reservation loop (see `bucket.rs`) must run governor's `check()` *at a chosen instant*.
//! governor reads the clock exactly once per `check()`, synchronously, and runs no user code
//! in between (we use `NoOpMiddleware`), so a thread-local override set just around the call is
//! sound, lock-free and needs no `unsafe`.

use std::cell::Cell;
use std::time::Instant;

use governor::clock::Clock;

thread_local! {
    static AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// governor clock following `tokio::time::Instant` (paused time included).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioClock;

impl TokioClock {
    /// Tokio's current instant as a std instant.
    pub(crate) fn tokio_now() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    /// Runs `f` with this thread's clock reading `at`, restoring the previous reading after.
    pub(crate) fn at<R>(at: Instant, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Instant>);
        impl Drop for Restore {
            fn drop(&mut self) {
                AT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(AT.with(|c| c.replace(Some(at))));
        f()
    }
}

impl Clock for TokioClock {
    type Instant = Instant;

    fn now(&self) -> Instant {
        AT.with(Cell::get).unwrap_or_else(Self::tokio_now)
    }
}
