//! [`Context`]: what a reconcile receives next to its key.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// What one reconcile receives next to its key.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::{Action, Context};
///
/// async fn reconcile(key: String, ctx: Context) -> Result<Action, std::io::Error> {
///     if ctx.token().is_cancelled() {
///         // Shutting down or no longer leading: stop writing, the key is reconciled again later.
///         return Ok(Action::RequeueRateLimited);
///     }
///     let _ = (key, ctx.attempts(), ctx.fencing_token());
///     Ok(Action::Done)
/// }
/// # let _ = reconcile;
/// ```
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) token: Arc<CancellationToken>,
    pub(crate) attempts: u32,
    pub(crate) fencing: Option<u64>,
}

impl Context {
    /// Fires on a shutdown request (the reconcile may still finish within the grace period) and
    /// on a lost lease (the reconcile is dropped at once; the token lets code spawned elsewhere
    /// for it stop too).
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// How many times this key failed in a row before this reconcile (its rate-limited requeues
    /// since its failures were last forgotten).
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The fencing token of the current term: strictly greater in every later term of any
    /// replica. `None` without a leader elector.
    #[must_use]
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing
    }
}
