//! The counting points of the `wake-counts` feature ([`crate::wake_counts`]). Without the
//! feature every function here is empty, so the queues compile to the same code as without
//! them.

#[cfg(feature = "wake-counts")]
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "wake-counts")]
use crate::wake_counts::{CONTENDED_LOCKS, EMPTY_WAKES, HAND_OUTS, PARKS, WAKES};

#[cfg(feature = "wake-counts")]
#[inline(always)]
fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A wake-up sent to waiting `get`s or streams (one `Notify` call).
#[inline(always)]
pub(crate) fn wake() {
    #[cfg(feature = "wake-counts")]
    bump(&WAKES);
}

/// A wait was woken and found nothing (called only with the feature: telling a wake-up that
/// found nothing takes a flag in the wait loop).
#[cfg(feature = "wake-counts")]
#[inline(always)]
pub(crate) fn empty_wake() {
    bump(&EMPTY_WAKES);
}

/// A wait returned `Pending` with its wake-up registered.
#[inline(always)]
pub(crate) fn park() {
    #[cfg(feature = "wake-counts")]
    bump(&PARKS);
}

/// A key handed out.
#[inline(always)]
pub(crate) fn hand_out() {
    #[cfg(feature = "wake-counts")]
    bump(&HAND_OUTS);
}

/// An acquisition of a queue's lock found it held (called only with the feature: the lock is
/// tried first).
#[cfg(feature = "wake-counts")]
#[inline(always)]
pub(crate) fn contended_lock() {
    bump(&CONTENDED_LOCKS);
}
