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
use crate::term::{Reconciler, TermEnd, TermSettings};

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

    fn run_term<'a>(
        &'a self,
        cancel: CancellationToken,
        work: Box<dyn FnOnce(Leadership) -> BoxFuture<'a, TermEnd> + Send + 'a>,
    ) -> BoxFuture<'a, Option<TermEnd>>;
}

impl<L: Lock> Elect for LeaderElector<L> {
    fn status(&self) -> watch::Receiver<ElectorStatus> {
        self.subscribe_status()
    }

    fn run_term<'a>(
        &'a self,
        cancel: CancellationToken,
        work: Box<dyn FnOnce(Leadership) -> BoxFuture<'a, TermEnd> + Send + 'a>,
    ) -> BoxFuture<'a, Option<TermEnd>> {
        Box::pin(self.run(cancel, work))
    }
}
