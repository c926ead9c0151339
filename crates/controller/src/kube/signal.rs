//! [`shutdown_on_signal`]: the shutdown token of an operator's process.

use tokio_util::sync::CancellationToken;
use tracing::info;

/// A token cancelled at the first SIGTERM (what the kubelet sends a pod it stops) or SIGINT
/// (Ctrl-C) the process receives: give it to [`Controller::run`](crate::Controller::run), which
/// then drains within its grace period and releases the lease if asked to. The signals are
/// caught from the call on, so the process no longer dies of them; set the pod's
/// `terminationGracePeriodSeconds` above the controller's grace period.
///
/// # Panics
///
/// Outside a tokio runtime, or when the signal handlers cannot be installed.
///
/// # Examples
///
/// ```no_run
/// # async fn f() {
/// let shutdown = ctrlq_controller::kube::shutdown_on_signal();
/// // controller.run(shutdown).await
/// # let _ = shutdown;
/// # }
/// ```
#[must_use]
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("the SIGTERM handler installs");
    let cancel = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        let terminated = terminate.recv();
        #[cfg(not(unix))]
        let terminated = std::future::pending::<Option<()>>();
        tokio::select! {
            _ = terminated => info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
        }
        cancel.cancel();
    });
    token
}
