//! [`Context`]: what a reconcile receives next to its key.

use tokio::time::Instant;
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
    pub(crate) token: CancellationToken,
    pub(crate) attempts: u32,
    pub(crate) fencing: Option<u64>,
    pub(crate) deadline: Option<Instant>,
}

impl Context {
    /// Fires on a shutdown request (the reconcile may still finish within the grace period), on
    /// a lost lease (the reconcile is dropped at once; the token lets code spawned elsewhere
    /// for it stop too), and at the reconcile's [soft deadline](Self::deadline).
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
    ///
    /// A reconcile starts only while its term's lease holds on this process's clock, but one
    /// that is running when the process freezes (a stopped process, CPU throttling, a paused
    /// VM) resumes mid-way after another replica may have taken over. Writes that must not
    /// come from a stale leader carry the token, and the resource refuses one older than the
    /// newest it has seen: for example an annotation compared in the same update, guarded by
    /// the object's `resourceVersion`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::Mutex;
    /// use ctrlq_controller::Context;
    ///
    /// /// A store that keeps, per object, the newest fencing token that wrote it.
    /// struct Fenced(Mutex<HashMap<String, (u64, String)>>);
    ///
    /// impl Fenced {
    ///     /// Writes `value` unless a newer term wrote the object already.
    ///     fn write(&self, key: &str, ctx: &Context, value: String) -> Result<(), &'static str> {
    ///         let token = ctx.fencing_token().unwrap_or(0);
    ///         let mut objects = self.0.lock().unwrap();
    ///         match objects.get(key) {
    ///             Some((newest, _)) if *newest > token => Err("a newer leader wrote this object"),
    ///             _ => {
    ///                 objects.insert(key.to_owned(), (token, value));
    ///                 Ok(())
    ///             }
    ///         }
    ///     }
    /// }
    /// # let _ = Fenced::write;
    /// ```
    #[must_use]
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing
    }

    /// When this reconcile's soft deadline passes
    /// ([`Controller::soft_deadline`](crate::Controller::soft_deadline)): then its
    /// [token](Self::token) fires, so that it can stop at a point of its choosing (and return
    /// an error or a requeue). `None` without one.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::{Action, Context};
    ///
    /// async fn reconcile(items: Vec<String>, ctx: Context) -> Result<Action, std::io::Error> {
    ///     for item in items {
    ///         if ctx.deadline_passed() {
    ///             // Out of time: the rest next time, at once.
    ///             return Ok(Action::requeue_after(std::time::Duration::ZERO));
    ///         }
    ///         let _ = item; // one step of work, awaited
    ///     }
    ///     Ok(Action::Done)
    /// }
    /// # let _ = reconcile;
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether this reconcile's soft deadline has passed (`false` without one).
    #[must_use]
    pub fn deadline_passed(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}
