//! The main example, run small in virtual time: its summary must show the whole story.

use std::time::Duration;

use examples::controller::{FAILOVER_BOUND, Options, run_in_memory};

fn small() -> Options {
    Options {
        objects: 60,
        updates: 30,
        failure_rate: 0.3,
        workers: 3,
        seed: 7,
        ..Options::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_small_run_reconciles_everything_across_a_failover() {
    let summary = run_in_memory(&small(), None)
        .await
        .expect("the run completes");
    let text = summary.render();
    assert_eq!(summary.stale, 0, "{text}");
    // Every object at least once, and the failures were retried.
    assert!(summary.reconciled >= 60, "{text}");
    assert!(summary.retries > 0, "{text}");
    // The leader was killed midway and another replica took over, never two at once.
    let killed = summary.killed.clone().expect("the leader was killed");
    assert!(summary.leaders.len() >= 2, "{text}");
    assert_ne!(summary.final_leader(), killed);
    assert_eq!(summary.max_concurrent_leaders, 1, "{text}");
    assert!(summary.checks >= 2 * summary.reconciled, "{text}");
    // The lease (1 s) must expire before the next leader: failover is at least the part of it
    // left after the last renew, and at most the bound.
    let failover = summary.failover.expect("a new leader after the kill");
    assert!(
        failover >= Duration::from_millis(600) && failover <= FAILOVER_BOUND,
        "failover {failover:?}"
    );
    // The next leader started warm: its queue filled from its own view of the objects (the
    // cluster had created at least half of them at the kill), and it reconciled at once.
    let (keys, after) = summary.warm_start.expect("the next leader started warm");
    assert!((30..=60).contains(&keys), "{text}");
    assert_eq!(after, Duration::ZERO, "{text}");
    assert!(
        text.contains("keys from the next leader's warm view"),
        "{text}"
    );
    // The final leader drained at the shutdown, with its re-checks in flight.
    let (in_flight, dropped) = summary.drain.expect("a drain");
    assert!(in_flight >= 1, "{text}");
    assert_eq!(dropped, 0, "{text}");
    assert!(summary.latency_p50 <= summary.latency_p99);
    assert!(
        text.contains("every object at its last generation: yes"),
        "{text}"
    );
    assert!(text.contains("two replicas at once never"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn without_a_kill_one_leader_does_everything() {
    let options = Options {
        kill_leader: false,
        failure_rate: 0.0,
        ..small()
    };
    let summary = run_in_memory(&options, None)
        .await
        .expect("the run completes");
    assert_eq!(summary.stale, 0);
    assert_eq!(summary.leaders.len(), 1);
    assert_eq!(summary.retries, 0);
    assert!(summary.failover.is_none());
    assert!(summary.warm_start.is_none());
}

/// A large initial listing under a stream of updates five times as long: the runner's
/// FIFO queue still reaches every listed object (the updates do not starve the listing).
#[tokio::test(start_paused = true)]
async fn the_initial_list_is_not_starved_by_updates() {
    let options = Options {
        objects: 400,
        updates: 2_000,
        failure_rate: 0.0,
        workers: 2,
        kill_leader: false,
        event_interval: Duration::from_micros(200),
        work_time: Duration::from_millis(2),
        ..small()
    };
    let summary = run_in_memory(&options, None)
        .await
        .expect("the run completes");
    assert_eq!(summary.stale, 0, "{}", summary.render());
    assert!(
        summary.latency_p99 < Duration::from_secs(2),
        "{}",
        summary.render()
    );
}

#[tokio::test(start_paused = true)]
async fn bad_options_are_refused() {
    let zero_workers = Options {
        workers: 0,
        ..small()
    };
    assert!(run_in_memory(&zero_workers, None).await.is_err());
    let always_failing = Options {
        failure_rate: 1.0,
        ..small()
    };
    assert!(run_in_memory(&always_failing, None).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn the_scheduling_section_places_every_pod() {
    let report = examples::scheduler::run(6, 3).await;
    assert_eq!(report.bound.len(), 6, "{:#?}", report.log);
    assert_eq!(report.were_backed_off, ["pod-1"]);
    assert!(!report.were_unschedulable.is_empty());
    assert_eq!(report.moved_by_event, report.were_unschedulable.len());
    // The flaky pod needed a second attempt.
    let flaky = report.bound.iter().find(|(p, _)| p == "pod-1").unwrap();
    assert!(flaky.1 >= 2);
}
