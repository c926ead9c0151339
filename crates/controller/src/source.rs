//! Key sources: subscribed once per run and pumped into the replica's warm view, which sends
//! each key on to the queue of the term running for it (without an elector, or with a cold
//! standby: subscribed at the start of every term and pumped into the term's queue),
//! resubscribed with backoff when they fail.
//!
//! A pump polls its stream for the keys it has ready at once (up to [`PUMP_BATCH`]) and adds
//! them with one `add_all`. Every poll is guarded: a stream that panics has the
//! keys it yielded before the panic added first, so no key it yielded is lost. An error item
//! (from a [`try_source`](crate::Controller::try_source)) is reported and the stream polled on;
//! a stream that panics, or ends right after an error, is reported and subscribed again after a
//! backoff (1 s, doubling up to 30 s, back to 1 s once a new subscription yields a key), as
//! kube-runtime re-lists a failed watch. A stream that ends after a key is done: its keys
//! stay in the warm view.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ctrlq_queue_async::WorkQueue;
use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tracing::Instrument;

use ctrlq_ratelimit::capped_exponential;

use crate::SourceFailure;
use crate::action::panic_message;
use crate::key::Key;

/// An error a source yielded, as its message.
pub(crate) type SourceError = String;

/// Makes a fresh stream of one source.
pub(crate) type Subscribe<K> =
    Box<dyn FnMut() -> BoxStream<'static, Result<K, SourceError>> + Send>;

/// The most keys a source pump adds with one `add_all`: the keys its source has ready at
/// once, up to this many.
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

    /// A fresh stream, or the panic message of a `subscribe` that panicked.
    fn subscribe(&self) -> Result<BoxStream<'static, Result<K, SourceError>>, String> {
        let mut subscribe = self.subscribe.lock();
        catch_unwind(AssertUnwindSafe(&mut *subscribe)).map_err(|p| panic_message(&*p))
    }

    /// Adds this source's keys to `sink` until the stream ends after a key or the sink closes;
    /// a failed stream is reported and subscribed again after a backoff.
    pub(crate) async fn pump(self: Arc<Self>, sink: impl Sink<K>, report: Arc<impl SourceReport>) {
        // Failures in a row since a subscription last yielded a key.
        let mut failures = 0;
        loop {
            let failure = match self.subscribe() {
                Ok(stream) => match self
                    .pump_stream(stream, &sink, &*report, &mut failures)
                    .await
                {
                    StreamEnd::Done => return,
                    StreamEnd::Failed(failure) => failure,
                },
                Err(panic) => SourceFailure::Panicked(panic),
            };
            let backoff = capped_exponential(INITIAL_BACKOFF, MAX_BACKOFF, failures);
            report.source_failed(self.index, &failure, backoff);
            tokio::time::sleep(backoff).await;
            failures = failures.saturating_add(1);
        }
    }

    /// Pumps one stream until it ends or fails.
    async fn pump_stream(
        &self,
        mut stream: BoxStream<'static, Result<K, SourceError>>,
        sink: &impl Sink<K>,
        report: &impl SourceReport,
        failures: &mut u32,
    ) -> StreamEnd {
        let mut keys = Vec::with_capacity(PUMP_BATCH);
        let mut last_error = None;
        loop {
            let step = std::future::poll_fn(|cx| poll_ready_keys(&mut stream, cx, &mut keys)).await;
            if !keys.is_empty() {
                // Added before the step is acted on: the keys yielded before an error, an end
                // or a panic are queued whatever comes next.
                *failures = 0;
                last_error = None;
                if !sink.add(&mut keys) {
                    return StreamEnd::Done;
                }
            }
            match step {
                Step::Keys => {}
                Step::Error(e) => {
                    report.source_error(self.index, &e);
                    last_error = Some(e);
                }
                Step::Ended => {
                    return last_error.map_or(StreamEnd::Done, |e| {
                        StreamEnd::Failed(SourceFailure::EndedWithError(e))
                    });
                }
                Step::Panicked(panic) => return StreamEnd::Failed(SourceFailure::Panicked(panic)),
            }
            // A source that always has keys ready must not keep the thread.
            tokio::task::coop::consume_budget().await;
        }
    }
}

/// Spawns one pump per source into `sink`, in the current span; aborting the set stops them.
pub(crate) fn pump_all<K: Key, S>(
    sources: &[Arc<Source<K>>],
    sink: &S,
    report: &Arc<impl SourceReport>,
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

/// Where a pump reports its source's errors and failures: the runner's counters and hooks.
pub(crate) trait SourceReport: Send + Sync + 'static {
    /// Reports an error item of source `index`.
    fn source_error(&self, index: usize, error: &str);

    /// Reports a failed source, subscribed again after `retry_in`.
    fn source_failed(&self, index: usize, failure: &SourceFailure, retry_in: Duration);
}

/// How one stream's pumping ended.
enum StreamEnd {
    /// It ended after a key, or the sink closed: done.
    Done,
    /// It failed: subscribe again after the backoff.
    Failed(SourceFailure),
}

/// Where a pump puts the keys: a term's queue, or a replica's warm view.
pub(crate) trait Sink<K>: Send + Sync {
    /// Adds (and takes) `keys`; `false` once the sink takes no more.
    fn add(&self, keys: &mut Vec<K>) -> bool;
}

impl<K: Key> Sink<K> for WorkQueue<K> {
    fn add(&self, keys: &mut Vec<K>) -> bool {
        // Refused only once the queue is shutting down.
        self.add_all(keys.drain(..)).is_ok()
    }
}

/// Moves the keys `stream` has ready into `keys`, up to [`PUMP_BATCH`]; `Pending` only while it
/// has none ready.
fn poll_ready_keys<K>(
    stream: &mut BoxStream<'static, Result<K, SourceError>>,
    cx: &mut Context<'_>,
    keys: &mut Vec<K>,
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
