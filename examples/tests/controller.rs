//! The main example, run small in virtual time: its summary must show the whole story.

use examples::controller::{Options, run_in_memory};

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
    assert_eq!(summary.stale, 0, "{}", summary.render());
    // Every object at least once, and the failures were retried.
    assert!(summary.reconciled >= 60, "{}", summary.render());
    assert!(summary.retries > 0, "{}", summary.render());
    // The leader was killed midway and another replica took over, never two at once.
    let killed = summary.killed.clone().expect("the leader was killed");
    assert!(summary.leaders.len() >= 2, "{}", summary.render());
    assert_ne!(summary.final_leader(), killed);
    assert_eq!(summary.max_concurrent_leaders, 1);
    // The lease (1 s) must expire before the next leader: failover is at least that, and at
    // most lease + the jittered retry (2.2 x 300 ms) + one poll of the example.
    let failover = summary.failover.expect("a new leader after the kill");
    assert!(
        failover.as_millis() >= 600 && failover.as_millis() <= 1_800,
        "failover {failover:?}"
    );
    assert!(summary.latency_p50 <= summary.latency_p99);
    assert!(summary.render().contains("final leader"));
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
