//! The one wait loop under every future that waits for a queue to hand something out
//! ([`Get`](crate::futures::Get), the stream of [`WorkQueue::stream`](crate::WorkQueue::stream)).
//!
//! It follows the multi-consumer pattern of tokio's `Notify` docs: look; if nothing is there,
//! `enable` the `Notified` (from then on a wake-up is not missed), look again, then await it.
//! Whatever is handed out leaves the queue only in the `poll` that returns it, so dropping the
//! future loses nothing; a wake-up it received and did not use is passed on by `Notified`'s drop
//! to another waiter. A wait that was woken and takes something uses its wake-up up as it
//! returns (it polls its `Notified` once more), so that wake-up is not passed on to a waiter that
//! would find the key already taken; each key queued sends its own wake-up.
//!
//! Every poll first asks tokio's cooperative budget (`tokio::task::coop::poll_proceed`), as
//! tokio's own channels do: a take that hands something out spends one unit, and once the task's
//! budget is spent the poll returns `Pending` (the task is woken again at once) without looking.
//! So a worker whose every `get` is ready (a burst of keys, a zero-delay requeue loop, a
//! reconcile that never awaits) still gives its thread back to the runtime every budget's worth
//! of items, and the elector's renewals and timers on that runtime keep running.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::task::coop;
use tracing::trace;

/// The target of the `TRACE` events that tell what waiting costs, one per occurrence, each
/// named for what it counts: `wake` (a call of a queue's `Notify`: one per key queued for the
/// `get`s, one for the streams, one of each at shutdown; a scheduling queue's, one per change
/// that lets a `pop` take an item where none could be taken before), `empty_wake` (a wait woken
/// that found nothing), `park` (a wait that returns `Pending`), `hand_out` (a key or item handed
/// out) and `contended_lock` (a queue's lock found held). A subscriber that counts them by name
/// sees where the CPU goes when workers meet; the benches do.
pub(crate) const WAKES: &str = "ctrlq_queue_async::wakes";

/// What a [`Wait`] waits on: a `Notify` woken when there may be something to take, and
/// the taking.
pub(crate) trait WaitOn {
    /// What a successful take returns.
    type Output;
    /// The `Notify` that an add (or a shutdown) wakes.
    fn notify(&self) -> &Notify;
    /// Takes what is there (`Some`), or `None` to wait.
    fn try_take(&self) -> Option<Self::Output>;
}

pin_project! {
    /// Waits until `source` hands something out.
    pub(crate) struct Wait<'a, S: ?Sized> {
        source: &'a S,
        #[pin]
        notified: Notified<'a>,
        // A poll returned `Pending` with `notified` enabled: it may hold a wake-up.
        parked: bool,
    }
}

impl<'a, S: WaitOn + ?Sized> Wait<'a, S> {
    pub(crate) fn new(source: &'a S) -> Self {
        Wait {
            source,
            notified: source.notify().notified(),
            parked: false,
        }
    }
}

impl<S: WaitOn + ?Sized> Future for Wait<'_, S> {
    type Output = S::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<S::Output> {
        let mut this = self.project();
        let source = *this.source;
        // Out of budget: yield before looking, so nothing is taken in a poll that returns
        // `Pending`. Dropping `budget` without `made_progress` gives the unit back.
        let budget = ready!(coop::poll_proceed(cx));
        // Fast path: something is there; no need to register with the `Notify`.
        if let Some(out) = source.try_take() {
            if *this.parked {
                // Woken, it took on its first look: it uses up its wake-up, which its drop
                // would otherwise pass on to another waiter, woken for a key already taken.
                let _ = this.notified.as_mut().poll(cx);
            }
            budget.made_progress();
            return Poll::Ready(out);
        }
        let mut woken = false;
        loop {
            // Register interest before looking again, so an add after the look wakes us.
            this.notified.as_mut().enable();
            if let Some(out) = source.try_take() {
                if *this.parked {
                    let _ = this.notified.as_mut().poll(cx);
                }
                budget.made_progress();
                return Poll::Ready(out);
            }
            if woken {
                trace!(name: "empty_wake", target: WAKES, "woken, found nothing");
            }
            if this.notified.as_mut().poll(cx).is_pending() {
                *this.parked = true;
                trace!(name: "park", target: WAKES, "waits");
                return Poll::Pending;
            }
            this.notified.set(source.notify().notified());
            woken = true;
        }
    }
}
