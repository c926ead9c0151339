//! The controller's elector and sharding plan with their lock types erased, so that a
//! [`Controller`](super::Controller) is generic over its keys and errors only.

use std::sync::Arc;

use ctrlq_leader::{ElectorStatus, LeaderElector, Leadership, Lock};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::Drain;
use crate::key::Key;
use crate::shard::{ShardFn, Sharding};
use crate::source::Source;
use crate::term::{Reconciler, TermSettings};

/// A [`Sharding`] with its lock type erased, and the shard function of the controller's keys.
pub(super) trait ShardPlan<K, E>: Send {
    fn run<'a>(
        self: Box<Self>,
        name: &'a str,
        settings: &'a TermSettings<K>,
        shared: &'a Arc<Reconciler<K, E>>,
        sources: &'a [Arc<Source<K>>],
        shutdown: &'a CancellationToken,
    ) -> BoxFuture<'a, Drain>;
}

impl<K: Key, E: Send + 'static, L: Lock> ShardPlan<K, E> for (Sharding<L>, ShardFn<K>) {
    fn run<'a>(
        self: Box<Self>,
        name: &'a str,
        settings: &'a TermSettings<K>,
        shared: &'a Arc<Reconciler<K, E>>,
        sources: &'a [Arc<Source<K>>],
        shutdown: &'a CancellationToken,
    ) -> BoxFuture<'a, Drain> {
        let (plan, shard_of) = *self;
        crate::shard::run::run(plan, name, settings, shared, sources, shard_of, shutdown).boxed()
    }
}

/// A [`LeaderElector`] with its lock type erased.
pub(super) trait Elect: Send + Sync {
    /// The elector's status: `leading` goes false when it stops renewing.
    fn status(&self) -> watch::Receiver<ElectorStatus>;

    /// [`LeaderElector::run_until_cancelled`]: `work` once per term led.
    fn stand<'a>(
        &'a self,
        cancel: CancellationToken,
        work: Box<dyn FnMut(Leadership) -> BoxFuture<'a, ()> + Send + 'a>,
    ) -> BoxFuture<'a, u64>;
}

impl<L: Lock> Elect for LeaderElector<L> {
    fn status(&self) -> watch::Receiver<ElectorStatus> {
        self.subscribe_status()
    }

    fn stand<'a>(
        &'a self,
        cancel: CancellationToken,
        work: Box<dyn FnMut(Leadership) -> BoxFuture<'a, ()> + Send + 'a>,
    ) -> BoxFuture<'a, u64> {
        Box::pin(self.run_until_cancelled(cancel, work))
    }
}
