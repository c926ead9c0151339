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
use governor::nanos::Nanos;

thread_local! {
    static AT: Cell<Option<Nanos>> = const { Cell::new(None) };
}

/// governor clock following `tokio::time::Instant` (paused time included), counting whole
/// nanoseconds since `base` so that all arithmetic is on `u64` (std `Instant` arithmetic cost
/// more than governor's whole check).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokioClock {
    base: Instant,
}

impl TokioClock {
    /// A clock whose zero is tokio's current instant.
    pub(crate) fn new() -> Self {
        Self {
            base: Self::tokio_now(),
        }
    }

    /// Tokio's current instant as a std instant.
    pub(crate) fn tokio_now() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    /// Nanoseconds from `base` to tokio's current instant (0 before `base`; saturating after
    /// 584 years).
    pub(crate) fn elapsed_ns(&self) -> u64 {
        let d = Self::tokio_now().saturating_duration_since(self.base);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs `f` with this thread's clock reading `at`, restoring the previous reading after.
    pub(crate) fn at<R>(at: u64, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Nanos>);
        impl Drop for Restore {
            fn drop(&mut self) {
                AT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(AT.with(|c| c.replace(Some(Nanos::from(at)))));
        f()
    }
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        AT.with(Cell::get)
            .unwrap_or_else(|| Nanos::from(self.elapsed_ns()))
    }
}
