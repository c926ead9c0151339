//! Leadership transitions as a lossless stream of events ([`LeadershipEvents`]).
//!
//! [`LeaderElector::subscribe_status`](crate::LeaderElector::subscribe_status) is a `watch`: it keeps only the latest value, so a quick
//! leading → not leading → leading can reach a slow reader as one change, or as none. Each subscriber here
//! has its own unbounded queue that every transition is pushed to, in order, with its instant
//! and fencing token. Transitions come at most one per grant, so the queues stay small for any
//! reader that keeps up at all.

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::LeadershipEnd;

/// One leadership transition of a [`LeaderElector`](crate::LeaderElector).
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{LeadershipEnd, LeadershipEvent};
///
/// fn log(event: &LeadershipEvent) -> String {
///     match event {
///         LeadershipEvent::Started { fencing_token, .. } => format!("leading, token {fencing_token}"),
///         LeadershipEvent::Stopped { reason, .. } if reason.is_loss() => "lost the lease".into(),
///         LeadershipEvent::Stopped { .. } => "stepped down".into(),
///         _ => "another transition".into(), // the enum is non-exhaustive
///     }
/// }
/// # let _ = log;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// The candidate acquired the lease and started its work.
    Started {
        /// When (tokio's clock).
        at: Instant,
        /// The grant's fencing token ([`Leadership::fencing_token`](crate::Leadership::fencing_token)).
        fencing_token: u64,
    },
    /// The candidate stopped leading: it no longer renews and no longer counts as leader. Its
    /// work may still be finishing (after a loss it was told to stop at once).
    Stopped {
        /// When (tokio's clock).
        at: Instant,
        /// The fencing token of the grant that ended.
        fencing_token: u64,
        /// Why ([`Leadership::end_reason`](crate::Leadership::end_reason)).
        reason: LeadershipEnd,
    },
}

/// The leadership transitions of one elector, from the moment of
/// [`subscribe_leadership`](crate::LeaderElector::subscribe_leadership), none lost and in order.
///
/// Ends (`recv` returns `None`) when the elector is dropped. For a `Stream`, wrap
/// [`into_inner`](Self::into_inner) in `tokio_stream::wrappers::UnboundedReceiverStream`.
///
/// # Examples
///
/// ```
/// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeadershipEvent, MemoryStore};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
/// let mut events = elector.subscribe_leadership();
/// elector.run(CancellationToken::new(), |_| async {}).await;
/// assert!(matches!(events.recv().await, Some(LeadershipEvent::Started { fencing_token: 0, .. })));
/// assert!(matches!(events.recv().await, Some(LeadershipEvent::Stopped { fencing_token: 0, .. })));
/// # }
/// ```
#[derive(Debug)]
pub struct LeadershipEvents {
    pub(crate) rx: mpsc::UnboundedReceiver<LeadershipEvent>,
}

impl LeadershipEvents {
    /// The next transition; `None` once the elector is dropped and every event was received.
    ///
    /// Equivalent to: `async fn recv(&mut self) -> Option<LeadershipEvent>;`
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses no event.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let mut events = elector.subscribe_leadership();
    /// drop(elector);
    /// assert_eq!(events.recv().await, None);
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Option<LeadershipEvent> {
        self.rx.recv().await
    }

    /// The next transition if one is waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    ///
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// assert_eq!(elector.subscribe_leadership().try_recv(), None);
    /// ```
    pub fn try_recv(&mut self) -> Option<LeadershipEvent> {
        self.rx.try_recv().ok()
    }

    /// The channel underneath, for stream adapters.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    ///
    /// let elector = LeaderElector::new(MemoryStore::new().lock("a"), LeaderElectionConfig::default()).unwrap();
    /// let rx = elector.subscribe_leadership().into_inner();
    /// assert!(rx.is_empty());
    /// ```
    pub fn into_inner(self) -> mpsc::UnboundedReceiver<LeadershipEvent> {
        self.rx
    }
}
