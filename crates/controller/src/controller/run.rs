//! [`Controller::run`]: the terms a controller runs, alone, under a leader elector, or as shards.

use std::sync::Arc;

use ctrlq_queue_async::WorkQueue;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span};

use super::Controller;
use crate::key::Key;
use crate::source::{Source, pump_all};
use crate::term::{Reconciler, TermEnd};
use crate::warm::WarmView;
use crate::{Drain, Summary};

impl<K: Key, E: Send + 'static> Controller<K, E> {
    /// Runs until `shutdown` fires, then drains and returns what was done.
    ///
    /// With an elector: stands for election, runs a term while leading, and after a lost lease
    /// stands again; `shutdown` is also the elector's cancel, so it releases the lease after the
    /// drain if configured to.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the workers with their in-flight reconciles and the term's
    /// queue, without a drain; with an elector, the lease is not released and expires.
    pub async fn run(self, shutdown: CancellationToken) -> Summary {
        let Self {
            name,
            reconcile,
            policy,
            hooks,
            sources,
            elector,
            sharding,
            warm,
            settings,
            telemetry,
        } = self;
        let shared = Arc::new(Reconciler {
            reconcile,
            policy,
            hooks,
            telemetry,
        });
        let sources: Vec<_> = sources
            .into_iter()
            .enumerate()
            .map(|(i, subscribe)| Arc::new(Source::new(i, subscribe)))
            .collect();
        let span = debug_span!("controller", controller = %name);
        let drain = async {
            if let Some(plan) = sharding {
                return plan
                    .run(&name, &settings, &shared, &sources, &shutdown)
                    .await;
            }
            let Some(elector) = elector else {
                let feed = |queue: &_| pump_all(&sources, queue, &shared);
                let finished = settings
                    .term(&shared, feed, None, None, &shutdown)
                    .await
                    .drained();
                return Drain::ran(finished);
            };
            // A warm standby: the sources run for the whole run, into the view.
            let view = Arc::new(WarmView::new());
            let _pumps = warm.then(|| pump_all(&sources, &view, &shared));
            let view = &*view;
            // How the last term led ended: a drain, or a loss after which no term was won
            // before the shutdown.
            let last = Mutex::new(None);
            let (settings, shared, shutdown, last_end) = (&settings, &shared, &shutdown, &last);
            let elector = &*elector;
            let sources = &sources;
            let work = move |leadership| {
                let status = elector.status();
                async move {
                    // Warm: the queue starts with the view's keys and gets the sources' next
                    // ones. Cold: the sources are subscribed for this term.
                    let feed = |queue: &WorkQueue<K>| {
                        if !warm {
                            return pump_all(sources, queue, shared);
                        }
                        shared.warm_start(None, view.attach(0, queue.clone()));
                        JoinSet::new()
                    };
                    let lease = Some((leadership, status));
                    let end = settings.term(shared, feed, lease, None, shutdown).await;
                    view.detach(0);
                    if end == TermEnd::Lost {
                        debug!("lease lost; standing for election again");
                    }
                    *last_end.lock() = Some(end);
                }
                .boxed()
            };
            elector.stand(shutdown.clone(), Box::new(work)).await;
            match last.into_inner() {
                Some(TermEnd::Drained { finished }) => Drain::ran(finished),
                Some(TermEnd::Lost) | None => Drain::NotLeading,
            }
        }
        .instrument(span)
        .await;
        shared.telemetry.summary(drain)
    }
}
