//! One bound for every wait of the elector tests.

use std::future::Future;
use std::time::Duration;

/// `f`'s output within an hour of paused time, far beyond any wait these tests make: a broken
/// elector fails the test instead of hanging it.
pub(crate) async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(3600), f)
        .await
        .expect("a bounded wait timed out")
}
