//! The sharded run: membership, the shards assigned to this replica, one elector and one term
//! per held shard, and the replica's sources pumped once into its warm view.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use ctrlq_leader::{LeaderElector, Lock};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::ShardFn;
use super::assign::shards_of;
use super::leases::ShardLeases;
use super::members::{Membership, View};
use super::sharding::Sharding;
use crate::controller::Run;
use crate::key::Key;
use crate::source::pump_all;
use crate::term::Stands;
use crate::warm::WarmView;
use crate::{Drain, Event};

/// What the membership loop and every shard's stand borrow.
struct Ctx<'a, K: Key, E, L> {
    plan: &'a Sharding<L>,
    name: &'a str,
    stands: Stands<'a, K, E>,
}

/// Runs a sharded replica until the shutdown fires and every held shard has drained; returns
/// how the drains went: [`Drain::NotLeading`] if no shard's term drained.
pub(crate) async fn run<K, E, L>(
    plan: Sharding<L>,
    shard_of: ShardFn<K>,
    run: Run<'_, K, E>,
) -> Drain
where
    K: Key,
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
    let view = Arc::new(WarmView::new(Some(shard_of)));
    let mut pumps = pump_all(sources, &view, shared);
    let timing = plan.config.timing();
    let member_prefix = format!("{}{name}-member-", plan.prefix);
    let member_lock = (plan.locks)(&format!("{member_prefix}{}", plan.identity));
    let mut members = Membership::new(
        member_lock,
        plan.locks.clone(),
        member_prefix,
        plan.identity.clone(),
        plan.shards,
        timing.lease_duration,
    )
    // One listing a look: the member records and the shard leases.
    .list_with(format!("{}{name}-", plan.prefix));
    let mut leases = ShardLeases::new(format!("{}{name}-shard-", plan.prefix), plan.locks.clone());
    let (view_tx, mut view_rx) = watch::channel(None::<View>);
    let mut stands = Stands::new(settings, shared, &view);
    stands.held = Some(&plan.held);
    let ctx = Ctx {
        plan: &plan,
        name,
        stands,
    };
    {
        // Looks at the members and the shard leases every retry period until shutdown. The
        // stale leases of the shards this view assigns here are blanked before the view is
        // published, so that a stand it starts takes them at its first try.
        let membership = async {
            loop {
                let view = members.look().await;
                if let Some(listed) = members.take_listing() {
                    let mine = match &view {
                        View::Members(live) => shards_of(live, plan.shards, &plan.identity),
                        View::Refused(_) => Vec::new(),
                    };
                    let held = plan.held.borrow().clone();
                    leases
                        .look(listed, &mine.into_iter().collect(), &held)
                        .await;
                }
                view_tx.send_if_modified(|v| {
                    let changed = v.as_ref() != Some(&view);
                    *v = Some(view);
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
                Ok(()) = view_rx.changed(), if !shutdown.is_cancelled() => {
                    let view = view_rx.borrow_and_update().clone();
                    desired = ctx.assigned(view.as_ref());
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
    ctx.stands.drain.into_inner()
}

impl<K: Key, E: Send + 'static, L: Lock> Ctx<'_, K, E, L> {
    /// The shards this replica stands for under `view`, reported.
    fn assigned(&self, view: Option<&View>) -> BTreeSet<u32> {
        match view {
            Some(View::Members(members)) => {
                let shards = shards_of(members, self.plan.shards, &self.plan.identity);
                debug!(?members, ?shards, "shards assigned");
                self.stands.shared.emit(&Event::ShardsAssigned {
                    shards: &shards,
                    members,
                });
                shards.into_iter().collect()
            }
            Some(View::Refused(reason)) => {
                warn!(%reason, "taking no shard");
                self.stands.shared.emit(&Event::ShardingRefused { reason });
                BTreeSet::new()
            }
            None => BTreeSet::new(),
        }
    }

    /// Stands for `shard` until `token` fires (see [`Stands::stand`]). Returns the shard.
    async fn stand(&self, shard: u32, token: CancellationToken) -> u32 {
        let record = format!("{}{}-shard-{shard}", self.plan.prefix, self.name);
        let lock = (self.plan.locks)(&record);
        match LeaderElector::new(lock, self.plan.config.clone()) {
            Ok(elector) => self.stands.stand(&elector, Some(shard), &token).await,
            Err(e) => {
                // Checked in `Sharding::new` on a lock from the same factory.
                warn!(error = %e, shard, "the shard's elector cannot run");
                token.cancelled().await;
            }
        }
        shard
    }
}
