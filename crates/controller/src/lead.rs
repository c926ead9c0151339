//! Terms on a lease: what a run hands to the plan that leads it (one elector, or the shard
//! layer above), a term each time a lease is won, filled from the warm view or by subscribing
//! the sources, and how their drains went.

use std::sync::Arc;

use ctrlq_leader::{ElectorStatus, Leadership};
use ctrlq_queue_async::PriorityQueue;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::key::Key;
use crate::source::{Source, pump_all};
use crate::term::{Reconciler, TermEnd, TermSettings};
use crate::warm::WarmView;
use crate::{Drain, Event};

/// What a run gives the plan that runs its terms.
pub(crate) struct Run<'a, K, E> {
    pub(crate) name: &'a str,
    pub(crate) settings: &'a TermSettings<K>,
    pub(crate) shared: &'a Arc<Reconciler<K, E>>,
    pub(crate) sources: &'a [Arc<Source<K>>],
    /// With an elector: whether the sources run once per run into a warm view.
    pub(crate) warm: bool,
    pub(crate) shutdown: &'a CancellationToken,
}

/// What the terms of a run share, and how their drains went.
pub(crate) struct Terms<'a, K: Key, E> {
    pub(crate) settings: &'a TermSettings<K>,
    pub(crate) shared: &'a Arc<Reconciler<K, E>>,
    pub(crate) view: &'a WarmView<K>,
    /// A cold standby's sources, subscribed for each term; `None`: terms start from the view.
    pub(crate) cold: Option<&'a [Arc<Source<K>>]>,
    /// How the terms' drains went: [`Drain::NotLeading`] until a term drains (at a hand-back or
    /// the shutdown), then [`Drain::CutShort`] once any drain was cut short.
    pub(crate) drain: Mutex<Drain>,
}

impl<K: Key, E: Send + 'static> Terms<'_, K, E> {
    /// Runs a term on `leadership` until the lease is lost or `cancel` fires: the term of
    /// `shard` when sharded (the view's part the term's queue is filled from, and what the
    /// term's events carry), `None` under one elector.
    pub(crate) async fn lead(
        &self,
        leadership: Leadership,
        status: watch::Receiver<ElectorStatus>,
        shard: Option<u32>,
        cancel: &CancellationToken,
    ) -> TermEnd {
        // Warm: the queue starts with the view's keys and gets the sources' next ones. Cold:
        // the sources are subscribed for this term.
        let feed = |queue: &PriorityQueue<K>| match self.cold {
            Some(sources) => pump_all(sources, queue, self.shared),
            None => {
                let keys = self.view.attach(shard.unwrap_or(0), queue.clone());
                debug!(keys, shard, "queue filled from the warm view");
                self.shared.emit(&Event::WarmStart { shard, keys });
                JoinSet::new()
            }
        };
        let lease = Some((leadership, status));
        let end = self
            .settings
            .term(self.shared, feed, lease, shard, cancel)
            .await;
        self.view.detach(shard.unwrap_or(0));
        let mut drain = self.drain.lock();
        if let TermEnd::Drained { finished } = end
            && *drain != Drain::CutShort
        {
            *drain = Drain::ran(finished);
        }
        end
    }
}
