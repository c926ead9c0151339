//! The controller's elector and sharding plan with their lock types erased, so that a
//! [`Controller`](super::Controller) is generic over its keys and errors only.

use std::sync::Arc;

use ctrlq_leader::{LeaderElector, Lock};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::Drain;
use crate::key::Key;
use crate::shard::{ShardFn, Sharding};
use crate::source::{Source, pump_all};
use crate::term::{Reconciler, Stands, TermSettings};
use crate::warm::WarmView;

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

/// How a run leads: under one elector, or as shards. Runs until the shutdown and returns how the
/// drains went.
pub(super) trait Plan<K, E>: Send {
    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain>;
}

impl<K: Key, E: Send + 'static, L: Lock> Plan<K, E> for (Sharding<L>, ShardFn<K>) {
    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain> {
        let (plan, shard_of) = *self;
        crate::shard::run::run(plan, shard_of, run).boxed()
    }
}

impl<K: Key, E: Send + 'static, L: Lock> Plan<K, E> for Arc<LeaderElector<L>> {
    fn run<'a>(self: Box<Self>, run: Run<'a, K, E>) -> BoxFuture<'a, Drain> {
        async move {
            // A warm standby: the sources run for the whole run, into the view.
            let view = Arc::new(WarmView::new(None));
            let _pumps = run.warm.then(|| pump_all(run.sources, &view, run.shared));
            let mut stands = Stands::new(run.settings, run.shared, &view);
            stands.cold = (!run.warm).then_some(run.sources);
            stands.stand(&self, None, run.shutdown).await;
            stands.drain.into_inner()
        }
        .boxed()
    }
}
