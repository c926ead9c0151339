//! Key sources: subscribed once per run and pumped into the replica's warm view, which sends
//! each key on to the queue of the term running for it (without an elector, or with a cold
//! standby: subscribed at the start of every term and pumped into the term's queue),
//! resubscribed with backoff when they fail.
//!
//! A pump polls its stream for the keys it has ready at once (up to [`PUMP_BATCH`]) and adds
//! them together (one `add_all` to a queue, one hold of the warm view's lock). Every poll is guarded: a stream that panics has the
//! keys it yielded before the panic added first, so no key it yielded is lost. An error item
//! (from a [`try_source`](crate::Controller::try_source)) is reported and the stream polled on;
//! a stream that panics, or ends right after an error, is reported and subscribed again after a
//! backoff (1 s, doubling up to 30 s, back to 1 s once a new subscription yields a key), as
//! kube-runtime re-lists a failed watch. A stream that ends after a key is done: its keys
//! stay in the warm view.

use std::future::poll_fn;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ctrlq_queue_async::PriorityQueue;
use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tracing::{Instrument, warn};

use ctrlq_ratelimit::capped_exponential;

use crate::action::panic_message;
use crate::key::Key;
use crate::priority::Queued;
use crate::term::Reconciler;
use crate::{Event, SourceFailure};

/// An error a source yielded, as its message.
pub(crate) type SourceError = String;

/// Makes a fresh stream of one source.
pub(crate) type Subscribe<K> =
    Box<dyn FnMut() -> BoxStream<'static, Result<Queued<K>, SourceError>> + Send>;

/// The most keys a source pump adds together: the keys its source has ready at once, up to
/// this many.
const PUMP_BATCH: usize = 64;

/// The first wait before a failed source is subscribed again; it doubles at each failure in a
/// row, up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One source of a controller, shared by the pumps of every term.
pub(crate) struct Source<K> {
    /// The source's position among the controller's sources, as events report it.
    pub(crate) index: usize,
    subscribe: Mutex<Subscribe<K>>,
}

/// What one poll of a stream for ready keys came to.
enum Step {
    /// Keys (maybe none) and the stream may have more.
    Keys,
    /// The stream yielded an error item.
    Error(SourceError),
    /// The stream ended.
    Ended,
    /// Polling the stream (or making it) panicked.
    Panicked(String),
}

impl<K: Key> Source<K> {
    pub(crate) fn new(index: usize, subscribe: Subscribe<K>) -> Self {
        Self {
            index,
            subscribe: Mutex::new(subscribe),
        }
    }

    /// Adds this source's keys to `sink` until a stream ends after a key or the sink closes;
    /// a failed stream is reported and subscribed again after a backoff.
    async fn pump<E: 'static>(self: Arc<Self>, sink: impl Sink<K>, report: Arc<Reconciler<K, E>>) {
        let source = self.index;
        let mut keys = Vec::with_capacity(PUMP_BATCH);
        // Failures in a row since a subscription last yielded a key.
        let mut failures = 0;
        loop {
            let subscribed = catch_unwind(AssertUnwindSafe(&mut *self.subscribe.lock()));
            let failure = 'stream: {
                let mut stream = match subscribed {
                    Ok(stream) => stream,
                    Err(p) => break 'stream SourceFailure::Panicked(panic_message(&*p)),
                };
                let mut last_error = None;
                loop {
                    let step = poll_fn(|cx| poll_ready_keys(&mut stream, cx, &mut keys)).await;
                    if !keys.is_empty() {
                        // Added before the step is acted on: the keys yielded before an error,
                        // an end or a panic are queued whatever comes next.
                        failures = 0;
                        last_error = None;
                        if !sink.add(&mut keys) {
                            return;
                        }
                    }
                    match step {
                        Step::Keys => {}
                        Step::Error(error) => {
                            warn!(source, error, "a source yielded an error");
                            report.emit(&Event::SourceError {
                                source,
                                error: &error,
                            });
                            last_error = Some(error);
                        }
                        Step::Ended => match last_error {
                            None => return,
                            Some(e) => break 'stream SourceFailure::EndedWithError(e),
                        },
                        Step::Panicked(panic) => break 'stream SourceFailure::Panicked(panic),
                    }
                    // A source that always has keys ready must not keep the thread.
                    tokio::task::coop::consume_budget().await;
                }
            };
            let retry_in = capped_exponential(INITIAL_BACKOFF, MAX_BACKOFF, failures);
            warn!(source, %failure, ?retry_in, "a source failed; subscribing again");
            let failure = &failure;
            report.emit(&Event::SourceFailed {
                source,
                failure,
                retry_in,
            });
            tokio::time::sleep(retry_in).await;
            failures = failures.saturating_add(1);
        }
    }
}

/// Spawns one pump per source into `sink`, in the current span; aborting the set stops them.
pub(crate) fn pump_all<K: Key, E: Send + 'static, S>(
    sources: &[Arc<Source<K>>],
    sink: &S,
    report: &Arc<Reconciler<K, E>>,
) -> JoinSet<()>
where
    S: Sink<K> + Clone + 'static,
{
    let mut pumps = JoinSet::new();
    for source in sources {
        let pump = source.clone().pump(sink.clone(), report.clone());
        pumps.spawn(pump.in_current_span());
    }
    pumps
}

/// Where a pump puts the keys: a term's queue, or a replica's warm view.
pub(crate) trait Sink<K>: Send + Sync {
    /// Adds (and takes) `keys`, each at its priority; `false` once the sink takes no more.
    fn add(&self, keys: &mut Vec<Queued<K>>) -> bool;
}

impl<K: Key> Sink<K> for PriorityQueue<K> {
    fn add(&self, keys: &mut Vec<Queued<K>>) -> bool {
        // Refused only once the queue is shutting down.
        self.add_all_with_priority(keys.drain(..).map(|q| (q.key, q.priority)))
            .is_ok()
    }
}

/// Moves the keys `stream` has ready into `keys`, up to [`PUMP_BATCH`]; `Pending` only while it
/// has none ready.
fn poll_ready_keys<K>(
    stream: &mut BoxStream<'static, Result<Queued<K>, SourceError>>,
    cx: &mut Context<'_>,
    keys: &mut Vec<Queued<K>>,
) -> Poll<Step> {
    while keys.len() < PUMP_BATCH {
        match catch_unwind(AssertUnwindSafe(|| stream.poll_next_unpin(cx))) {
            Ok(Poll::Ready(Some(Ok(key)))) => keys.push(key),
            Ok(Poll::Ready(Some(Err(e)))) => return Poll::Ready(Step::Error(e)),
            Ok(Poll::Ready(None)) => return Poll::Ready(Step::Ended),
            Ok(Poll::Pending) if keys.is_empty() => return Poll::Pending,
            Ok(Poll::Pending) => break,
            Err(panic) => return Poll::Ready(Step::Panicked(panic_message(&*panic))),
        }
    }
    Poll::Ready(Step::Keys)
}
