//! [`parallelize_until`]: client-go's `ParallelizeUntil` on tokio tasks.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Bad arguments of [`parallelize_until`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParallelizeError {
    /// `workers` was 0: nothing could ever run (the original silently did nothing).
    #[error("parallelize_until needs at least one worker")]
    ZeroWorkers,
    /// `chunk_size` was 0 (the original silently used 1).
    #[error("parallelize_until needs a chunk size of at least one piece")]
    ZeroChunkSize,
}

/// Runs `work(piece)` for every piece in `0..pieces`, exactly once each, on at most `workers`
/// tokio tasks at a time, handing out `chunk_size` consecutive pieces per grab. Checks `cancel`
/// before each piece and stops there once it fires (pieces already running finish).
///
/// Returns when every started piece has finished. A panic in `work` is resumed in the caller
/// once the other tasks have stopped, as the original re-panics.
///
/// # Errors
///
/// [`ParallelizeError`] for zero workers or a zero chunk size; nothing runs then.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let sum = Arc::new(AtomicUsize::new(0));
/// let s = sum.clone();
/// ctrlq_queue_async::parallelize_until(4, 100, 8, &CancellationToken::new(), move |piece| {
///     let s = s.clone();
///     async move {
///         s.fetch_add(piece, Ordering::Relaxed);
///     }
/// })
/// .await
/// .unwrap();
/// assert_eq!(sum.load(Ordering::Relaxed), 4950);
/// # }
/// ```
pub async fn parallelize_until<F, Fut>(
    workers: usize,
    pieces: usize,
    chunk_size: usize,
    cancel: &CancellationToken,
    work: F,
) -> Result<(), ParallelizeError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if workers == 0 {
        return Err(ParallelizeError::ZeroWorkers);
    }
    if chunk_size == 0 {
        return Err(ParallelizeError::ZeroChunkSize);
    }
    let chunks = pieces.div_ceil(chunk_size);
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let mut tasks = JoinSet::new();
    for _ in 0..workers.min(chunks) {
        let (next, work, cancel) = (next.clone(), work.clone(), cancel.clone());
        tasks.spawn(async move {
            loop {
                let chunk = next.fetch_add(1, Ordering::Relaxed);
                if chunk >= chunks {
                    return;
                }
                let start = chunk * chunk_size;
                for piece in start..(start + chunk_size).min(pieces) {
                    if cancel.is_cancelled() {
                        return;
                    }
                    work(piece).await;
                }
            }
        });
    }
    let mut panic = None;
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined
            && e.is_panic()
            && panic.is_none()
        {
            panic = Some(e.into_panic());
        }
    }
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    Ok(())
}
