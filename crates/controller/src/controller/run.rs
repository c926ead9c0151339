//! [`Controller::run`]: the terms a controller runs, alone, under a leader elector, or as shards.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug_span};

use super::Controller;
use super::erased::Run;
use crate::key::Key;
use crate::source::{Source, pump_all};
use crate::term::{Reconciler, TermEnd};
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
            let run = Run {
                name: &name,
                settings: &settings,
                shared: &shared,
                sources: &sources,
                warm,
                shutdown: &shutdown,
            };
            if let Some(plan) = sharding.or(elector) {
                return plan.run(run).await;
            }
            let feed = |queue: &_| pump_all(&sources, queue, &shared);
            let end = settings.term(&shared, feed, None, None, &shutdown).await;
            Drain::ran(end == TermEnd::Drained { finished: true })
        }
        .instrument(span)
        .await;
        shared.telemetry.summary(drain)
    }
}
