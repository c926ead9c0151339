//! [`Controller::run`]: the terms a controller runs, alone, under a leader elector, or as shards.

use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span};

use super::Controller;
use crate::key::Key;
use crate::source::Source;
use crate::term::{Feed, Reconciler, TermEnd};
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
            settings,
            recorder,
        } = self;
        let shared = Arc::new(Reconciler {
            reconcile,
            policy,
            hooks,
            recorder,
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
                let finished = settings
                    .term(&shared, Feed::Sources(&sources), None, &shutdown)
                    .await
                    .drained();
                return Drain::ran(finished);
            };
            loop {
                let (s, sh, src) = (&settings, &shared, &sources[..]);
                let cancel = shutdown.clone();
                let shutdown = &shutdown;
                let el = &elector;
                let end = elector
                    .run_term(
                        cancel,
                        Box::new(move |l| {
                            s.term(sh, Feed::Sources(src), Some((l, el.status())), shutdown)
                                .boxed()
                        }),
                    )
                    .await;
                match end {
                    None => return Drain::NotLeading,
                    Some(TermEnd::Drained { finished }) => return Drain::ran(finished),
                    Some(TermEnd::Lost) => debug!("lease lost; standing for election again"),
                }
            }
        }
        .instrument(span)
        .await;
        shared.recorder.summary(drain)
    }
}
