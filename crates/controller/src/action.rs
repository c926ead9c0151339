//! [`Action`]: what happens to a key after its reconcile, and [`ReconcileError`]: why it failed.

use std::fmt;
use std::time::Duration;

/// What the runner does with a key once its reconcile has returned.
///
/// Whatever the action, a key added again while it was being reconciled is reconciled once more
/// as soon as this reconcile is done (the work queue's dirty rule).
///
/// | action | the key's failure history | the key |
/// |---|---|---|
/// | [`Done`](Self::Done) | cleared | done until added again |
/// | [`RequeueAfter`](Self::RequeueAfter) | cleared | added again after the delay |
/// | [`Requeue`](Self::Requeue) | cleared | added again after the delay, at the priority |
/// | [`RequeueRateLimited`](Self::RequeueRateLimited) | charged | added again after the limiter's delay |
///
/// A key requeued comes back at the priority it was handed out at (see
/// [`priority`](crate::priority)), except with [`Requeue`](Self::Requeue), which names one.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_controller::Action;
///
/// // "Check again in five minutes": one value, the failures are forgotten.
/// let action = Action::requeue_after(Duration::from_secs(300));
/// assert_eq!(action, Action::RequeueAfter(Duration::from_secs(300)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Reconciled: forget the key's failures; it comes back only when a source adds it.
    Done,
    /// Forget the key's failures and reconcile it again after this delay.
    RequeueAfter(Duration),
    /// Forget the key's failures and reconcile it again after `after`, queued at `priority`
    /// (the higher of it and a priority the key is queued at meanwhile):
    /// [`requeue_after`](Self::requeue_after) with [`at_priority`](Self::at_priority).
    Requeue {
        /// The delay.
        after: Duration,
        /// The priority (see [`priority`](crate::priority)).
        priority: i32,
    },
    /// Reconcile the key again after the rate limiter's delay, which grows with each failure.
    RequeueRateLimited,
}

impl Action {
    /// [`Action::RequeueAfter`] with `delay`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use ctrlq_controller::Action;
    /// assert_eq!(Action::requeue_after(Duration::ZERO), Action::RequeueAfter(Duration::ZERO));
    /// ```
    #[must_use]
    pub fn requeue_after(delay: Duration) -> Self {
        Self::RequeueAfter(delay)
    }

    /// This requeue at `priority`: [`RequeueAfter`](Self::RequeueAfter) (or
    /// [`Requeue`](Self::Requeue)) becomes [`Requeue`](Self::Requeue) with `priority`;
    /// [`Done`](Self::Done) and [`RequeueRateLimited`](Self::RequeueRateLimited) (which keeps
    /// the priority the key was handed out at) are unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// use ctrlq_controller::Action;
    /// use ctrlq_controller::priority::LOW;
    ///
    /// // A periodic check, behind live changes.
    /// let action = Action::requeue_after(Duration::from_secs(300)).at_priority(LOW);
    /// assert_eq!(action, Action::Requeue { after: Duration::from_secs(300), priority: LOW });
    /// assert_eq!(Action::Done.at_priority(LOW), Action::Done);
    /// ```
    #[must_use]
    pub fn at_priority(self, priority: i32) -> Self {
        match self {
            Self::RequeueAfter(after) | Self::Requeue { after, .. } => {
                Self::Requeue { after, priority }
            }
            other => other,
        }
    }
}

/// A failed reconcile, as the error policy sees it.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::ReconcileError;
///
/// let e: ReconcileError<std::io::Error> = ReconcileError::Panicked("boom".into());
/// assert_eq!(e.to_string(), "reconcile panicked: boom");
/// ```
#[derive(Debug)]
pub enum ReconcileError<E> {
    /// The reconcile returned this error.
    Failed(E),
    /// The reconcile panicked with this message; the panic was caught, the key is kept.
    Panicked(String),
    /// The reconcile was dropped at its hard deadline, this long after it started
    /// ([`Controller::hard_deadline`](crate::Controller::hard_deadline)).
    TimedOut(Duration),
}

impl<E> ReconcileError<E> {
    /// The error the reconcile returned, if it returned one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::ReconcileError;
    /// assert_eq!(ReconcileError::Failed(7).failed(), Some(&7));
    /// assert_eq!(ReconcileError::<i32>::Panicked("x".into()).failed(), None);
    /// ```
    pub fn failed(&self) -> Option<&E> {
        match self {
            Self::Failed(e) => Some(e),
            Self::Panicked(_) | Self::TimedOut(_) => None,
        }
    }

    /// Whether the reconcile panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::ReconcileError;
    /// assert!(ReconcileError::<()>::Panicked("x".into()).is_panic());
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self, Self::Panicked(_))
    }
}

impl<E: fmt::Display> fmt::Display for ReconcileError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(e) => write!(f, "reconcile failed: {e}"),
            Self::Panicked(msg) => write!(f, "reconcile panicked: {msg}"),
            Self::TimedOut(after) => {
                write!(f, "reconcile dropped at its deadline, after {after:?}")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ReconcileError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Failed(e) => Some(e),
            Self::Panicked(_) | Self::TimedOut(_) => None,
        }
    }
}

/// The message of a caught panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}
