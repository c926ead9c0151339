//! `kube::shutdown_on_signal` in a process of its own (this test binary): a SIGTERM cancels the
//! token, and the process lives on.

use std::time::Duration;

#[tokio::test]
async fn a_sigterm_cancels_the_shutdown_token() {
    let shutdown = ctrlq_controller::kube::shutdown_on_signal();
    tokio::task::yield_now().await;
    assert!(!shutdown.is_cancelled());
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    tokio::time::timeout(Duration::from_secs(10), shutdown.cancelled())
        .await
        .expect("cancelled within 10 s of the SIGTERM");
}
