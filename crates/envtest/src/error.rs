//! The error of [`ControlPlane::try_start`](crate::ControlPlane::try_start).

use std::process::ExitStatus;
use std::time::Duration;

/// Why a control plane could not start.
///
/// [`ControlPlane::start`] panics with this error's message; [`ControlPlane::try_start`] returns
/// it. Every variant's message says what to do or carries the processes' logs.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ControlPlane, Error};
///
/// # async fn test() {
/// match ControlPlane::try_start().await {
///     Ok(plane) => println!("serving at {}", plane.url()),
///     // The message names the three places searched and how to fill each.
///     Err(e @ Error::BinariesNotFound { .. }) => panic!("{e}"),
///     Err(e) => panic!("the control plane did not start: {e}"),
/// }
/// # }
/// ```
///
/// [`ControlPlane::start`]: crate::ControlPlane::start
/// [`ControlPlane::try_start`]: crate::ControlPlane::try_start
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No place searched holds both `etcd` and `kube-apiserver` (see
    /// [`find_binaries`](crate::find_binaries)).
    #[error("no etcd and kube-apiserver found; looked, in order, at:{}", numbered(.tried))]
    BinariesNotFound {
        /// Each place searched, in order, with why it did not serve.
        tried: Vec<String>,
    },
    /// A file, directory or process of the control plane could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being made.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The service-account signing key could not be generated.
    #[error("cannot generate the service-account signing key")]
    Key,
    /// A process exited while the control plane was starting.
    #[error("{process} exited ({status}) while starting\n{logs}")]
    Exited {
        /// `etcd` or `kube-apiserver`.
        process: &'static str,
        /// How it exited.
        status: ExitStatus,
        /// The tails of both logs.
        logs: String,
    },
    /// kube-apiserver did not answer `ok` on `/readyz` in time.
    #[error(
        "kube-apiserver was not ready at {url} within {timeout:?} (last answer: {last})\n{logs}"
    )]
    NotReady {
        /// The API server's URL.
        url: String,
        /// How long it was given.
        timeout: Duration,
        /// Its last answer, or the last request's error.
        last: String,
        /// The tails of both logs.
        logs: String,
    },
}

fn numbered(tried: &[String]) -> String {
    tried
        .iter()
        .enumerate()
        .map(|(i, place)| format!("\n  {}. {place}", i + 1))
        .collect()
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
