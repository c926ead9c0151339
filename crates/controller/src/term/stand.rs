//! Terms on a lease: standing for election with one elector (the controller's, or a shard's),
//! a term each time the lease is won, filled from the warm view or by subscribing the sources.

use std::collections::BTreeSet;
use std::sync::Arc;

use ctrlq_leader::{LeaderElector, Lock};
use ctrlq_queue_async::WorkQueue;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{Reconciler, TermEnd, TermSettings};
use crate::key::Key;
use crate::source::{Source, pump_all};
use crate::warm::WarmView;
use crate::{Drain, Event};

/// What the terms of a run's stands share, and how their drains went.
pub(crate) struct Stands<'a, K: Key, E> {
    pub(crate) settings: &'a TermSettings<K>,
    pub(crate) shared: &'a Arc<Reconciler<K, E>>,
    pub(crate) view: &'a WarmView<K>,
    /// A cold standby's sources, subscribed for each term; `None`: terms start from the view.
    pub(crate) cold: Option<&'a [Arc<Source<K>>]>,
    /// Sharded: the shards this replica leads.
    pub(crate) held: Option<&'a watch::Sender<BTreeSet<u32>>>,
    /// How the terms' drains went: [`Drain::NotLeading`] until a term drains (at a hand-back or
    /// the shutdown), then [`Drain::CutShort`] once any drain was cut short.
    pub(crate) drain: Mutex<Drain>,
}

impl<'a, K: Key, E: Send + 'static> Stands<'a, K, E> {
    pub(crate) fn new(
        settings: &'a TermSettings<K>,
        shared: &'a Arc<Reconciler<K, E>>,
        view: &'a WarmView<K>,
    ) -> Self {
        Self {
            settings,
            shared,
            view,
            cold: None,
            held: None,
            drain: Mutex::new(Drain::NotLeading),
        }
    }

    /// Stands for election on `elector` until `cancel` fires: each time the lease is won, runs a
    /// term on it (on `shard`, when sharded) until the lease is lost or `cancel` fires; after a
    /// loss, stands again.
    pub(crate) async fn stand<L: Lock>(
        &self,
        elector: &LeaderElector<L>,
        shard: Option<u32>,
        cancel: &CancellationToken,
    ) {
        let slot = shard.unwrap_or(0);
        elector
            .run_until_cancelled(cancel.clone(), |leadership| {
                let status = elector.subscribe_status();
                let fencing_token = leadership.fencing_token();
                async move {
                    if let Some(shard) = shard {
                        self.shared.emit(&Event::ShardLeading {
                            shard,
                            fencing_token,
                        });
                        self.held_changed(shard, true);
                    }
                    // Warm: the queue starts with the view's keys and gets the sources' next
                    // ones. Cold: the sources are subscribed for this term.
                    let feed = |queue: &WorkQueue<K>| match self.cold {
                        Some(sources) => pump_all(sources, queue, self.shared),
                        None => {
                            let keys = self.view.attach(slot, queue.clone());
                            self.shared.warm_start(shard, keys);
                            JoinSet::new()
                        }
                    };
                    let lease = Some((leadership, status));
                    let end = self
                        .settings
                        .term(self.shared, feed, lease, shard, cancel)
                        .await;
                    self.view.detach(slot);
                    let lost = end == TermEnd::Lost;
                    if let Some(shard) = shard {
                        self.held_changed(shard, false);
                        self.shared.emit(&Event::ShardEnded { shard, lost });
                    } else if lost {
                        debug!("lease lost; standing for election again");
                    }
                    let mut drain = self.drain.lock();
                    if let TermEnd::Drained { finished } = end
                        && *drain != Drain::CutShort
                    {
                        *drain = Drain::ran(finished);
                    }
                }
            })
            .await;
    }

    /// Sharded: `shard` came to this replica (`true`) or left it.
    fn held_changed(&self, shard: u32, gained: bool) {
        if let Some(held) = self.held {
            held.send_modify(|held| {
                if gained {
                    held.insert(shard);
                } else {
                    held.remove(&shard);
                }
            });
        }
        self.shared.telemetry.shard(gained);
    }
}
