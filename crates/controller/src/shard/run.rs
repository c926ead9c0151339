//! The sharded run: membership, the shards assigned to this replica, one elector and one term
//! per held shard, and the replica's sources pumped once into its warm view.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ctrlq_leader::{LeaderElector, Lock};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::assign::shards_of;
use super::key::ShardKey;
use super::leases::{ShardLeases, Unowned};
use super::members::{Look, Membership};
use super::sharding::Sharding;
use super::sharding::key_shard;
use crate::key::Key;
use crate::lead::{Run, Terms};
use crate::source::pump_all;
use crate::term::TermEnd;
use crate::warm::WarmView;
use crate::{Drain, Event};

/// What the membership loop and every shard's stand borrow.
struct Ctx<'a, K: Key, E, L> {
    plan: &'a Sharding<L>,
    name: &'a str,
    terms: Terms<'a, K, E>,
    /// Whether the server's ignoring a shard selector was logged.
    warned_unfiltered: AtomicBool,
}

/// Runs a sharded replica until the shutdown fires and every held shard has drained; returns
/// how the drains went: [`Drain::NotLeading`] if no shard's term drained.
pub(crate) async fn run<K, E, L>(plan: Sharding<L>, run: Run<'_, K, E>) -> Drain
where
    K: Key + ShardKey,
    E: Send + 'static,
    L: Lock,
{
    let Run {
        name,
        settings,
        shared,
        sources,
        shutdown,
        ..
    } = run;
    let view = Arc::new(WarmView::new(Some(Arc::new(key_shard(
        plan.by_namespace,
        plan.shards,
    )))));
    let mut pumps = pump_all(sources, &view, shared);
    let timing = plan.config.timing();
    let mut members = Membership::new(
        plan.locks.clone(),
        format!("{}{name}-member-", plan.prefix),
        plan.identity.clone(),
        plan.shards,
        timing.lease_duration,
    )
    // One listing a look: the member records and the shard leases.
    .list_with(format!("{}{name}-", plan.prefix));
    let mut leases = ShardLeases::new(format!("{}{name}-shard-", plan.prefix), plan.locks.clone());
    let (look_tx, mut look_rx) = watch::channel(None::<Look>);
    let ctx = Ctx {
        plan: &plan,
        name,
        terms: Terms {
            settings,
            shared,
            view: &view,
            cold: None,
            drain: Mutex::new(Drain::NotLeading),
        },
        warned_unfiltered: AtomicBool::new(false),
    };
    {
        // Looks at the members and the shard leases every retry period until shutdown. The
        // stale leases of the shards this look assigns here are blanked before the look is
        // published, so that a stand it starts takes them at its first try.
        let membership = async {
            let mut last_unowned = Unowned::default();
            loop {
                let look = members.look().await;
                if let Some(listed) = members.take_listing() {
                    let mine = match &look {
                        Look::Members(live) => shards_of(live, plan.shards, &plan.identity),
                        Look::Refused(_) => Vec::new(),
                    };
                    let held = plan.held.borrow().clone();
                    leases
                        .look(listed, &mine.into_iter().collect(), &held)
                        .await;
                    let unowned = leases.unowned(plan.shards);
                    if !unowned.shards.is_empty() || unowned != last_unowned {
                        shared.emit(&Event::ShardsUnowned {
                            shards: &unowned.shards,
                            longest: unowned.longest,
                        });
                    }
                    last_unowned = unowned;
                }
                look_tx.send_if_modified(|v| {
                    let changed = v.as_ref() != Some(&look);
                    *v = Some(look);
                    changed
                });
                tokio::select! {
                    () = tokio::time::sleep(timing.retry_period) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        };
        tokio::pin!(membership);
        let mut membership_done = false;
        let mut desired = BTreeSet::new();
        let mut running: HashMap<u32, CancellationToken> = HashMap::new();
        let mut stands: FuturesUnordered<BoxFuture<'_, u32>> = FuturesUnordered::new();
        loop {
            tokio::select! {
                () = &mut membership, if !membership_done => membership_done = true,
                Ok(()) = look_rx.changed(), if !shutdown.is_cancelled() => {
                    let look = look_rx.borrow_and_update().clone();
                    desired = ctx.assigned(look.as_ref());
                    for (shard, token) in &running {
                        if !desired.contains(shard) {
                            // Handed back: the term drains, then the lease is released.
                            token.cancel();
                        }
                    }
                }
                Some(shard) = stands.next(), if !stands.is_empty() => {
                    running.remove(&shard);
                }
            }
            if shutdown.is_cancelled() {
                if membership_done && stands.is_empty() {
                    break;
                }
                continue;
            }
            // Stand for the assigned shards that have no stand, a shard handed back and
            // assigned again before its drain ended among them once that drain ended.
            for &shard in &desired {
                if let Entry::Vacant(slot) = running.entry(shard) {
                    let token = slot.insert(shutdown.child_token()).clone();
                    stands.push(ctx.stand(shard, token).boxed());
                }
            }
        }
    }
    let resign = tokio::time::timeout(timing.renew_deadline, members.resign());
    if resign.await.is_err() {
        debug!("resigning the member record timed out");
    }
    pumps.abort_all();
    while pumps.join_next().await.is_some() {}
    ctx.terms.drain.into_inner()
}

impl<K: Key, E: Send + 'static, L: Lock> Ctx<'_, K, E, L> {
    /// The shards this replica stands for under `look`, reported.
    fn assigned(&self, look: Option<&Look>) -> BTreeSet<u32> {
        match look {
            Some(Look::Members(members)) => {
                let shards = shards_of(members, self.plan.shards, &self.plan.identity);
                debug!(?members, ?shards, "shards assigned");
                self.terms.shared.emit(&Event::ShardsAssigned {
                    shards: &shards,
                    members,
                });
                shards.into_iter().collect()
            }
            Some(Look::Refused(reason)) => {
                warn!(%reason, "taking no shard");
                self.terms.shared.emit(&Event::ShardingRefused { reason });
                BTreeSet::new()
            }
            None => BTreeSet::new(),
        }
    }

    /// Reports that the API server sent every shard's objects when a watch listed `shard`;
    /// logged as a warning once a run.
    fn unfiltered(&self, shard: u32) {
        if !self.warned_unfiltered.swap(true, Ordering::Relaxed) {
            warn!(
                shard,
                "the API server ignored the shard selector of a watch of the held shards (is its \
                 ShardedListAndWatch feature gate on?): each shard's watch receives every object \
                 and keeps its own"
            );
        }
        self.terms
            .shared
            .emit(&Event::ShardSelectorIgnored { shard });
    }

    /// Stands for `shard` until `token` fires: runs a term on its lease each time it is won,
    /// and stands again after a loss. Returns the shard.
    async fn stand(&self, shard: u32, token: CancellationToken) -> u32 {
        let record = format!("{}{}-shard-{shard}", self.plan.prefix, self.name);
        let lock = (self.plan.locks)(&record);
        let elector = match LeaderElector::new(lock, self.plan.config.clone()) {
            Ok(elector) => elector,
            Err(e) => {
                // Checked in `Sharding::new` on a lock from the same factory.
                warn!(error = %e, shard, "the shard's elector cannot run");
                token.cancelled().await;
                return shard;
            }
        };
        let (terms, token) = (&self.terms, &token);
        elector
            .run_until_cancelled(token.clone(), |leadership| {
                let status = elector.subscribe_status();
                let fencing_token = leadership.fencing_token();
                async move {
                    terms.shared.emit(&Event::ShardLeading {
                        shard,
                        fencing_token,
                    });
                    self.plan.held.send_modify(|held| {
                        held.insert(shard);
                    });
                    // The watches that follow the held shards list this one before its term
                    // reconciles anything: its keys in the warm view (from an earlier term)
                    // must not be read from a store that lacks its objects.
                    let listed = tokio::select! {
                        unfiltered = self.plan.gain(shard) => {
                            if unfiltered {
                                self.unfiltered(shard);
                            }
                            true
                        }
                        () = token.cancelled() => false,
                        () = leadership.token().cancelled() => false,
                    };
                    let lost = if listed {
                        let end = terms.lead(leadership, status, Some(shard), token).await;
                        matches!(end, TermEnd::Lost)
                    } else {
                        debug!(shard, "the shard's term ended before its watches listed it");
                        !token.is_cancelled()
                    };
                    self.plan.held.send_modify(|held| {
                        held.remove(&shard);
                    });
                    self.plan.lose(shard);
                    terms.shared.emit(&Event::ShardEnded { shard, lost });
                }
            })
            .await;
        shard
    }
}
