//! Helpers shared by the integration tests.

/// A current-thread runtime with paused time, for tests that outlive or switch runtimes.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}
