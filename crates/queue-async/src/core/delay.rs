//! The delay task: one per queue that has had a delayed add, owning a
//! `tokio_util::time::DelayQueue` and sleeping until exactly the next deadline.
//!
//! The queue's `waiting` map (under the queue's lock) is the truth about which key waits until
//! when; the task's timer entries are only alarms. An alarm whose key was added meanwhile, or
//! whose deadline was moved earlier, finds no matching entry and is ignored, so the task never
//! needs a round trip with producers, and producers never wait for it (an unbounded channel).

use std::future::poll_fn;
use std::hash::Hash;
use std::sync::Weak;
use std::task::Poll;

use hashbrown::HashMap;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;
use tracing::{Instrument, debug, debug_span};

use super::{Machine, Shared};

/// A message from the queue to its delay task.
pub(crate) enum Command<K> {
    /// Ring for `key` at the instant (earlier than any alarm already set for it).
    Wait(K, Instant),
    /// `key` was added now: its alarm is void.
    Cancel(K),
    /// Reply once every earlier command and every alarm due now has been handled.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    Sync(tokio::sync::oneshot::Sender<()>),
}

/// Runs until the queue shuts down or its last handle is dropped (the sender is dropped with the
/// queue's state, which ends `rx`).
pub(crate) async fn run<K, S>(
    shared: Weak<Shared<K, S>>,
    mut rx: mpsc::UnboundedReceiver<Command<K>>,
    name: String,
) where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    let span = debug_span!("workqueue_delay", queue = %name);
    async move {
        let mut timers: DelayQueue<K> = DelayQueue::new();
        let mut alarms: HashMap<K, (Key, Instant)> = HashMap::new();
        debug!("delay task started");
        loop {
            tokio::select! {
                command = rx.recv() => match command {
                    Some(Command::Wait(key, deadline)) => match alarms.get_mut(&key) {
                        Some((alarm, at)) => {
                            timers.reset_at(alarm, deadline);
                            *at = deadline;
                        }
                        None => {
                            let alarm = timers.insert_at(key.clone(), deadline);
                            alarms.insert(key, (alarm, deadline));
                        }
                    },
                    Some(Command::Cancel(key)) => {
                        if let Some((alarm, _)) = alarms.remove(&key) {
                            timers.remove(&alarm);
                        }
                    }
                    Some(Command::Sync(reply)) => {
                        if !fire_due(&shared, &mut timers, &mut alarms).await {
                            break;
                        }
                        let _ = reply.send(());
                    }
                    None => break,
                },
                Some(expired) = poll_fn(|cx| timers.poll_expired(cx)) => {
                    // Everything else due now goes in the same batch (one lock, priority order).
                    let mut due = take_due(&mut timers).await;
                    due.push(expired.into_inner());
                    if !fire(&shared, due, &mut alarms) {
                        break;
                    }
                }
            }
        }
        debug!("delay task ended");
    }
    .instrument(span)
    .await;
}

/// Every key whose alarm is due now. Unconstrained by tokio's cooperative budget, which would
/// otherwise end a large batch early and let a getter see only part of it.
async fn take_due<K>(timers: &mut DelayQueue<K>) -> Vec<K> {
    tokio::task::unconstrained(poll_fn(|cx| {
        let mut due = Vec::new();
        while let Poll::Ready(Some(expired)) = timers.poll_expired(cx) {
            due.push(expired.into_inner());
        }
        Poll::Ready(due)
    }))
    .await
}

/// Hands `due` to the queue; `false` if the queue is gone.
fn fire<K, S>(
    shared: &Weak<Shared<K, S>>,
    due: Vec<K>,
    alarms: &mut HashMap<K, (Key, Instant)>,
) -> bool
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    let due: Vec<(K, Instant)> = due
        .into_iter()
        .filter_map(|key| alarms.remove(&key).map(|(_, deadline)| (key, deadline)))
        .collect();
    let Some(shared) = shared.upgrade() else {
        return false;
    };
    if !due.is_empty() {
        shared.fire(due);
    }
    true
}

/// Fires every alarm that is due now; `false` if the queue is gone.
async fn fire_due<K, S>(
    shared: &Weak<Shared<K, S>>,
    timers: &mut DelayQueue<K>,
    alarms: &mut HashMap<K, (Key, Instant)>,
) -> bool
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: Machine<K>,
{
    let due = take_due(timers).await;
    fire(shared, due, alarms)
}
