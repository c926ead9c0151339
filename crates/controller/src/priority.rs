//! Live changes first: the priorities a controller's queue hands keys out by, and the aging that
//! keeps the low ones from starving.
//!
//! A controller's queue is a priority queue
//! ([`PriorityQueue`](ctrlq_queue_async::PriorityQueue)). Every key a source yields comes with a
//! priority ([`Queued`]): a watch ([`Watch`](crate::kube::Watch), feature `kube`) yields the
//! keys of its initial list, of every relist and of a new subscription's snapshot at [`LOW`],
//! and the keys of live watch events (an object applied or deleted) at [`NORMAL`]; a resync
//! yields [`LOW`]; a term's queue is filled from the warm view at [`LOW`]. A key is handed out
//! at the highest priority it was queued with, so a live change to a key that waits at `LOW`
//! raises it. A plain stream's keys ([`Controller::source`](crate::Controller::source)) are at
//! [`NORMAL`] unless the stream yields [`Queued`] values. So a change that arrives while a
//! list of 100,000 keys drains is reconciled next, not after the list (controller-runtime's
//! priority queue, on by default since v0.23, does the same with the same values).
//!
//! **No key starves.** Keys age ([`Controller::aging`](crate::Controller::aging), default
//! [`DEFAULT_AGING`]): a key ready for `d` ranks as if its priority were `priority + d / aging`.
//! So a key queued at [`LOW`] waits at most `(NORMAL − LOW) × aging` = 100 × 600 ms = **60 s**
//! behind [`NORMAL`] keys queued after it, however many keep coming (controller-runtime's queue
//! has no aging, and its low keys can wait without bound under steady live traffic:
//! kubernetes-sigs/controller-runtime#3496). Aging is the same as ordering every key by
//! `when it was queued − priority × aging`: a live change overtakes the keys of a list queued
//! less than 60 s before it, and queues behind those queued earlier.
//!
//! Why these defaults: 60 s is longer than a list of 100,000 keys takes to drain at a few
//! thousand reconciles a second, so live changes come first for the whole drain of any list
//! a controller's memory holds, and far shorter than the half hour an operator waited for its
//! startup keys under controller-runtime's queue (#3496). A controller whose reconciles are
//! slow (a list takes minutes to drain) and whose live changes must still come first raises
//! the aging; one that wants first in, first out sets the smallest aging
//! (`Duration::from_nanos(1)`), where the 100 priority steps are 100 ns.
//!
//! # Examples
//!
//! ```
//! use ctrlq_controller::priority::{LOW, NORMAL, Queued};
//!
//! let listed = Queued::low("ns/a");
//! let changed: Queued<&str> = "ns/b".into();
//! assert_eq!((listed.priority, changed.priority), (LOW, NORMAL));
//! ```

use std::time::Duration;

/// The priority of live changes: a watch's applied and deleted objects, a plain source's keys.
pub const NORMAL: i32 = 0;

/// The priority of keys from an initial list, a relist, a resync and a warm fill:
/// controller-runtime's `LowPriority`.
pub const LOW: i32 = -100;

/// How long a ready key waits for its rank to rise by one priority: 600 ms, so a [`LOW`] key
/// waits at most 60 s behind [`NORMAL`] keys queued after it (see the module docs).
pub const DEFAULT_AGING: Duration = Duration::from_millis(600);

/// A key a source yields, with the priority it is queued at. A source's stream may yield keys
/// (at [`NORMAL`]: `K` converts into `Queued<K>`) or `Queued` values.
///
/// # Examples
///
/// ```
/// use ctrlq_controller::priority::{LOW, Queued};
/// use ctrlq_controller::{Action, Context, Controller};
///
/// // The first three keys are a listing (background), the last a user's change.
/// let c = Controller::new("pods", |_key: u32, _ctx: Context| async {
///         Ok::<_, std::io::Error>(Action::Done)
///     })
///     .source(|| futures::stream::iter([Queued::low(1), Queued::low(2), Queued::low(3), 2.into()]));
/// # let _ = (c, LOW);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Queued<K> {
    /// The key.
    pub key: K,
    /// Its priority: higher is handed out first.
    pub priority: i32,
}

impl<K> Queued<K> {
    /// `key` at `priority`.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = ctrlq_controller::priority::Queued::new("a", 7);
    /// assert_eq!(q.priority, 7);
    /// ```
    pub fn new(key: K, priority: i32) -> Self {
        Self { key, priority }
    }

    /// `key` at [`LOW`]: from a listing, not a change.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_controller::priority::{LOW, Queued};
    /// assert_eq!(Queued::low("a").priority, LOW);
    /// ```
    pub fn low(key: K) -> Self {
        Self::new(key, LOW)
    }
}

impl<K> From<K> for Queued<K> {
    /// `key` at [`NORMAL`].
    fn from(key: K) -> Self {
        Self::new(key, NORMAL)
    }
}
