//! The delay task: it polls the queue's timers, so that keys whose delay is over are added at
//! their deadline, and ends when the queue shuts down or its last handle is dropped.
//!
//! The timers (a `tokio_util::time::DelayQueue`) live in the queue's state, under its lock:
//! `add_after` sets a key's timer there directly, and `DelayQueue` wakes this task when a new
//! timer is earlier than the one it sleeps on. The task wakes exactly at the next deadline; it
//! never polls on a heartbeat, and no channel stands between producers and the timers.

use std::future::poll_fn;
use std::hash::Hash;
use std::sync::Weak;
use std::task::Poll;

use tokio::sync::{mpsc, oneshot};
use tokio::task::unconstrained;
use tracing::{Instrument, debug, debug_span};

use super::{Machine, Shared};

/// Runs until `settle` closes (shutdown, or the queue is dropped) or the queue is gone.
pub(crate) async fn run<K, S>(
    shared: Weak<Shared<K, S>>,
    mut settle: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    name: String,
) where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    let span = debug_span!("workqueue_delay", queue = %name);
    async move {
        debug!("delay task started");
        loop {
            tokio::select! {
                request = settle.recv() => match request {
                    Some(reply) => {
                        // Fire what is due at this instant, then answer.
                        if !poll_once(&shared).await {
                            break;
                        }
                        let _ = reply.send(());
                    }
                    None => break,
                },
                // Unconstrained: the keys due at one instant are added in one batch, in priority
                // order, rather than cut where tokio's cooperative budget runs out.
                () = unconstrained(poll_fn(|cx| match shared.upgrade() {
                    Some(shared) => {
                        shared.poll_timers(cx);
                        Poll::Pending
                    }
                    None => Poll::Ready(()),
                })) => break,
            }
        }
        debug!("delay task ended");
    }
    .instrument(span)
    .await;
}

/// Polls the timers once; `false` if the queue is gone.
async fn poll_once<K, S>(shared: &Weak<Shared<K, S>>) -> bool
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    unconstrained(poll_fn(|cx| {
        Poll::Ready(
            shared
                .upgrade()
                .map(|shared| shared.poll_timers(cx))
                .is_some(),
        )
    }))
    .await
}
