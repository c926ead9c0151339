//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tokio::time::timeout;

/// Every wait's bound under paused time: far beyond any delay in the tests and free to wait
/// for, so a bug fails the test instead of hanging it.
pub(crate) const BOUND: Duration = Duration::from_secs(3600);

/// `fut`'s output, within [`BOUND`] (paused time).
pub(crate) async fn bounded<F: Future>(fut: F) -> F::Output {
    timeout(BOUND, fut).await.expect("done within the bound")
}

/// The bound of a wait in real time, for an item that is already queued: ample, yet a bug fails
/// the test instead of hanging it.
pub(crate) const REAL_BOUND: Duration = Duration::from_secs(10);

/// `fut`'s output, within [`REAL_BOUND`] (real time).
pub(crate) async fn soon<F: Future>(fut: F) -> F::Output {
    timeout(REAL_BOUND, fut)
        .await
        .expect("done within the real-time bound")
}

/// Lets every ready task run until it waits (the paused clock does not move).
pub(crate) async fn let_run() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// A current-thread runtime with paused time, for tests that outlive or switch runtimes or
/// run one scenario per proptest case.
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime")
}
