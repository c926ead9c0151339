//! The scheduling-queue section of the main example: pods that do not fit wait in
//! *unschedulable*, a pod whose attempt errs waits out a *backoff*, and a node-add event brings
//! the waiting pods back to *active*, where they are scheduled.

use std::time::Duration;

use ctrlq_queue_async::scheduling::{
    ActionType, ClusterEvent, Priority, QueueingHint, SchedulingQueue, SchedulingQueueConfig,
    SubQueue,
};
use tokio::time::Instant;

/// A node was added to the cluster: the one event that can help a pod that did not fit.
pub const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);

/// The plugin that rejects a pod when no node has a free slot.
pub const FIT: &str = "NodeResourcesFit";

/// A pod to place: a name and a priority.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Higher is scheduled first.
    pub priority: i64,
    /// The first attempt at this pod fails with a (transient) error.
    pub flaky: bool,
}

impl Priority for Pod {
    fn priority(&self) -> i64 {
        self.priority
    }
}

/// What the scheduling section did, line by line, and the final placement.
#[derive(Debug, Clone, Default)]
pub struct SchedulingReport {
    /// One line per transition, in order, with the virtual time since the start.
    pub log: Vec<String>,
    /// `(pod, attempts)` in the order the pods were bound.
    pub bound: Vec<(String, u32)>,
    /// How many pods the node-add event moved out of unschedulable.
    pub moved_by_event: usize,
    /// Pods seen in unschedulable (by name).
    pub were_unschedulable: Vec<String>,
    /// Pods seen in backoff after an error (by name).
    pub were_backed_off: Vec<String>,
}

/// Runs the scheduling section: `pods` pods on one node with `slots` free slots; whenever every
/// pod left waits in unschedulable, a node with `slots` more is added.
///
/// Uses `tokio::time`, so it runs in virtual time under a paused clock.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let report = examples::scheduler::run(6, 3).await;
/// assert_eq!(report.bound.len(), 6);
/// # }
/// ```
pub async fn run(pods: usize, slots: usize) -> SchedulingReport {
    let start = Instant::now();
    let queue = SchedulingQueue::<String, Pod>::builder(
        SchedulingQueueConfig::default()
            .initial_backoff(Duration::from_millis(200))
            .max_backoff(Duration::from_secs(2))
            // Show the backoff: an empty active queue waits for it instead of popping early.
            .pop_from_backoff(false),
    )
    // Only a new node can help a pod that did not fit.
    .hint(NODE_ADD, FIT, |_pod, _event, _payload| {
        Ok(QueueingHint::Queue)
    })
    .build()
    .unwrap();

    let mut report = SchedulingReport::default();
    let log = |report: &mut SchedulingReport, line: String| {
        let t = start.elapsed().as_secs_f64();
        report.log.push(format!("t={t:>5.2}s  {line}"));
    };
    for i in 0..pods {
        let pod = Pod {
            priority: (i % 3) as i64 * 10,
            flaky: i == 1,
        };
        queue
            .add(format!("pod-{i}"), pod)
            .expect("the queue is open");
    }
    log(
        &mut report,
        format!("{pods} pods queued; one node with {slots} free slots"),
    );

    let mut free = slots;
    while report.bound.len() < pods {
        // Once every pod left waits in unschedulable, the cluster changes: a node is added.
        let pending = queue.pending();
        if free == 0
            && pending.active.is_empty()
            && pending.backoff.is_empty()
            && !pending.unschedulable.is_empty()
        {
            free += slots;
            let moved = queue.move_all(&NODE_ADD);
            report.moved_by_event += moved;
            log(
                &mut report,
                format!("event Node/Add: {slots} more slots; {moved} pods leave unschedulable"),
            );
        }
        let Some(mut item) = queue.pop().await else {
            break;
        };
        let name = item.key().clone();
        if item.data().flaky && item.attempts() == 1 {
            // A transient error: no plugin rejected the pod, so it backs off.
            item.set_rejectors([]);
            queue
                .add_unschedulable_if_not_present(item, queue.scheduling_cycle())
                .expect("a popped pod is not queued");
            report.were_backed_off.push(name.clone());
            log(
                &mut report,
                format!("{name}: error on attempt 1 -> backoff"),
            );
        } else if free == 0 {
            item.set_rejectors([FIT]);
            queue
                .add_unschedulable_if_not_present(item, queue.scheduling_cycle())
                .expect("a popped pod is not queued");
            let place = match queue.where_is(&name) {
                Some(SubQueue::Unschedulable) => "unschedulable",
                Some(SubQueue::Backoff) => "backoff",
                Some(SubQueue::Active) => "active",
                None => "nowhere",
            };
            report.were_unschedulable.push(name.clone());
            log(
                &mut report,
                format!("{name}: no free slot ({FIT}) -> {place}"),
            );
        } else {
            free -= 1;
            let item = item.done();
            report.bound.push((name.clone(), item.attempts()));
            log(
                &mut report,
                format!(
                    "{name} (priority {}): bound on attempt {}",
                    item.data().priority,
                    item.attempts()
                ),
            );
        }
    }
    queue.shut_down();
    report
}
