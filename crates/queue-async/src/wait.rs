//! The one wait loop under every future that waits for a queue to hand something out
//! ([`Get`](crate::Get), the stream of [`WorkQueue::stream`](crate::WorkQueue::stream)).
//!
//! It follows the multi-consumer pattern of tokio's `Notify` docs: look; if nothing is there,
//! `enable` the `Notified` (from then on a wake-up is not missed), look again, then await it.
//! Whatever is handed out leaves the queue only in the `poll` that returns it, so dropping the
//! future loses nothing; a wake-up it received and did not use is passed on by `Notified`'s drop
//! to another waiter.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// Something a [`Wait`] takes from: a `Notify` woken when there may be something to take, and
/// the taking.
pub(crate) trait Source {
    /// What a successful take returns.
    type Output;
    /// The `Notify` that an add (or a shutdown) wakes.
    fn notify(&self) -> &Notify;
    /// Takes what is there (`Some`), or `None` to wait.
    fn try_take(&self) -> Option<Self::Output>;
}

pin_project! {
    /// Waits until `source` hands something out.
    pub(crate) struct Wait<'a, S> {
        source: &'a S,
        #[pin]
        notified: Notified<'a>,
    }
}

impl<'a, S: Source> Wait<'a, S> {
    pub(crate) fn new(source: &'a S) -> Self {
        Wait {
            source,
            notified: source.notify().notified(),
        }
    }
}

impl<S: Source> Future for Wait<'_, S> {
    type Output = S::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<S::Output> {
        let mut this = self.project();
        let source = *this.source;
        // Fast path: something is there; no need to register with the `Notify`.
        if let Some(out) = source.try_take() {
            return Poll::Ready(out);
        }
        loop {
            // Register interest before looking again, so an add after the look wakes us.
            this.notified.as_mut().enable();
            if let Some(out) = source.try_take() {
                return Poll::Ready(out);
            }
            ready!(this.notified.as_mut().poll(cx));
            this.notified.set(source.notify().notified());
        }
    }
}
