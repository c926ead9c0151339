//! Live changes first, under paused time: a live key overtakes a list that drains, aging keeps
//! every low key within its bound under steady live traffic, a reconcile requeues at a chosen
//! priority, the backoff choice, and the reconcile deadlines.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::priority::{LOW, Queued};
use ctrlq_controller::{
    Action, Context, Controller, Event, InBackoff, ReconcileError, ReconcileOutcome,
};
use futures::StreamExt;
use support::bounded;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

/// Each reconcile's key and start, in order.
type Log = Arc<Mutex<Vec<(u32, Instant)>>>;

/// A controller of `workers` workers whose reconcile logs its key, awaits `work`, and stops the
/// run once `stop_after` reconciles have started.
fn logging(
    workers: usize,
    work: Duration,
    stop_after: usize,
) -> (Controller<u32, Infallible>, Log, CancellationToken) {
    let log = Log::default();
    let shutdown = CancellationToken::new();
    let (l, stop) = (log.clone(), shutdown.clone());
    let c = Controller::new("live", move |key: u32, _ctx: Context| {
        let mut log = l.lock().unwrap();
        log.push((key, Instant::now()));
        if log.len() == stop_after {
            stop.cancel();
        }
        async move {
            sleep(work).await;
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .workers(workers);
    (c, log, shutdown)
}

/// 2,000 listed keys, 4 workers, reconciles that await 1 ms: the list takes half a second. A
/// live change 100 ms in starts within one reconcile's time of its arrival, ahead of the
/// ~1,600 listed keys still queued (first in, first out, it would wait about 400 ms).
#[tokio::test(start_paused = true)]
async fn a_live_change_overtakes_a_list_that_drains() {
    let (c, log, shutdown) = logging(4, Duration::from_millis(1), 2001);
    let start = Instant::now();
    let live_at = start + Duration::from_millis(100);
    let run = c
        .source(move || {
            let listed = futures::stream::iter((0..2000).map(Queued::low));
            let change = futures::stream::once(async move {
                tokio::time::sleep_until(live_at).await;
                Queued::from(5000)
            });
            listed.chain(change).chain(futures::stream::pending())
        })
        .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(summary.reconciles, 2001);
    let log = log.lock().unwrap();
    let (position, (_, at)) = log
        .iter()
        .enumerate()
        .find(|(_, (k, _))| *k == 5000)
        .expect("the live key was reconciled");
    assert!(
        *at <= live_at + Duration::from_millis(1),
        "started {:?} after it came",
        at.duration_since(live_at)
    );
    assert!(
        log.len() - position > 1500,
        "only {} listed keys were still queued behind it",
        log.len() - position - 1
    );
}

/// Live keys arrive at twice the rate the one worker serves them, for two seconds: without
/// aging the 20 listed keys would wait for the end of the traffic. With an aging of 1 ms (a
/// bound of 100 ms), no listed key is reconciled after a live key that arrived more than
/// 100 ms after it, and every one of them is reconciled while the traffic lasts.
#[tokio::test(start_paused = true)]
async fn aging_bounds_the_wait_of_listed_keys_under_steady_live_traffic() {
    let bound = Duration::from_millis(100);
    let live = 4000;
    let (c, log, shutdown) = logging(1, Duration::from_millis(1), 20 + 1500);
    let start = Instant::now();
    let run = c
        .aging(bound / 100)
        .source(move || {
            let listed = futures::stream::iter((0..20).map(Queued::low));
            // A live key every 0.5 ms, each a new key: 1000..
            let changes = futures::stream::unfold(0u32, move |i| async move {
                (i < live).then_some(())?;
                tokio::time::sleep_until(start + Duration::from_micros(500) * (i + 1)).await;
                Some((Queued::from(1000 + i), i + 1))
            });
            listed.chain(changes).chain(futures::stream::pending())
        })
        .run(shutdown);
    bounded(Duration::from_secs(60), run).await;
    let log = log.lock().unwrap();
    let arrival = |k: u32| start + Duration::from_micros(500) * (k - 1000 + 1);
    let listed: Vec<usize> = (0..20)
        .map(|k| {
            log.iter()
                .position(|(key, _)| *key == k)
                .unwrap_or_else(|| panic!("listed key {k} starved"))
        })
        .collect();
    let last_listed = *listed.iter().max().unwrap();
    for (key, _) in &log[..last_listed] {
        if *key >= 1000 {
            assert!(
                arrival(*key) <= start + bound,
                "live key {key}, queued {:?} after the list, went before a listed key",
                arrival(*key).duration_since(start)
            );
        }
    }
    let (_, at) = log[last_listed];
    assert!(
        at < start + Duration::from_secs(2),
        "the last listed key waited {:?}, behind the whole traffic",
        at.duration_since(start)
    );
}

/// A reconcile requeues its key at `LOW` (`at_priority`): keys queued at the normal priority
/// after the requeue go first; requeued at its own priority, the key would go before them.
#[tokio::test(start_paused = true)]
async fn a_requeue_at_low_priority_goes_behind_later_live_keys() {
    for (low, expected) in [(true, [1, 2, 3, 4, 5, 1]), (false, [1, 2, 3, 1, 4, 5])] {
        let log = Log::default();
        let shutdown = CancellationToken::new();
        let (l, stop) = (log.clone(), shutdown.clone());
        let first = Arc::new(AtomicU32::new(0));
        let run = Controller::new("requeue", move |key: u32, _ctx: Context| {
            let mut log = l.lock().unwrap();
            log.push((key, Instant::now()));
            if log.len() == 6 {
                stop.cancel();
            }
            let again = key == 1 && first.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                sleep(Duration::from_millis(10)).await;
                let action = Action::requeue_after(Duration::ZERO);
                Ok::<_, Infallible>(match (again, low) {
                    (false, _) => Action::Done,
                    (true, true) => action.at_priority(LOW),
                    (true, false) => action,
                })
            }
        })
        .source(|| {
            let now = futures::stream::iter([1, 2, 3]);
            let later = futures::stream::once(sleep(Duration::from_millis(15)))
                .flat_map(|()| futures::stream::iter([4, 5]));
            now.chain(later).chain(futures::stream::pending())
        })
        .run(shutdown);
        bounded(Duration::from_secs(60), run).await;
        let order: Vec<u32> = log.lock().unwrap().iter().map(|(k, _)| *k).collect();
        assert_eq!(order, expected, "requeued at LOW: {low}");
    }
}

/// A key that keeps failing while its object keeps changing (a change every millisecond for
/// 100 ms): with `RunNow` every change retries it at once and charges the limiter; with
/// `WaitOut` it is retried only at the end of each backoff (5, 10, 20, 40 ms with the default
/// limiter), and its failure count is never reset by a change.
#[tokio::test(start_paused = true)]
async fn a_change_to_a_key_in_backoff_waits_it_out_only_when_asked() {
    let mut attempts_by_choice = Vec::new();
    for choice in [InBackoff::RunNow, InBackoff::WaitOut] {
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let a = attempts.clone();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = Controller::new("backoff", move |_key: u32, ctx: Context| {
            a.lock().unwrap().push(ctx.attempts());
            async { Err::<Action, _>("still broken") }
        })
        .in_backoff(choice)
        .source(|| {
            futures::stream::unfold(0u32, |i| async move {
                (i < 100).then_some(())?;
                if i > 0 {
                    sleep(Duration::from_millis(1)).await;
                }
                Some((7, i + 1))
            })
            .chain(futures::stream::pending())
        })
        .run(shutdown);
        let run = tokio::spawn(run);
        sleep(Duration::from_millis(100)).await;
        stop.cancel();
        bounded(Duration::from_secs(60), run).await.unwrap();
        let attempts = attempts.lock().unwrap().clone();
        assert!(
            attempts.windows(2).all(|w| w[1] == w[0] + 1),
            "{choice:?}: the failure count grows by one at each attempt, never reset: {attempts:?}"
        );
        attempts_by_choice.push(attempts.len());
    }
    let [run_now, wait_out] = attempts_by_choice[..] else {
        unreachable!()
    };
    assert!(
        (5..=6).contains(&wait_out),
        "WaitOut: {wait_out} attempts in 100 ms"
    );
    assert!(run_now >= 20, "RunNow: only {run_now} attempts in 100 ms");
}

/// A soft deadline fires the reconcile's token and `deadline_passed` turns true; a reconcile
/// that stops then is not an overrun.
#[tokio::test(start_paused = true)]
async fn a_soft_deadline_fires_the_token() {
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("soft", move |_key: u32, ctx: Context| {
        let (s, stop) = (s.clone(), stop.clone());
        async move {
            let start = Instant::now();
            assert_eq!(ctx.deadline(), Some(start + Duration::from_secs(2)));
            assert!(!ctx.deadline_passed());
            ctx.token().cancelled().await;
            *s.lock().unwrap() = Some((start.elapsed(), ctx.deadline_passed()));
            stop.cancel();
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .soft_deadline(Duration::from_secs(2))
    .source(|| futures::stream::iter([1]))
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    assert_eq!(*seen.lock().unwrap(), Some((Duration::from_secs(2), true)));
    assert_eq!((summary.successes, summary.overruns), (1, 0));
}

/// A hard deadline drops a reconcile that waits past it: the error policy is told
/// (`TimedOut`), the default policy requeues it rate limited, the summary counts it.
#[tokio::test(start_paused = true)]
async fn a_hard_deadline_drops_the_reconcile_and_tells_the_policy() {
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let told = Arc::new(Mutex::new(Vec::new()));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let (a, t, o) = (attempts.clone(), told.clone(), outcomes.clone());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("hard", move |_key: u32, ctx: Context| {
        let mut a = a.lock().unwrap();
        a.push((ctx.attempts(), Instant::now()));
        let second = a.len() == 2;
        if second {
            stop.cancel();
        }
        async move {
            if !second {
                sleep(Duration::from_secs(3600)).await;
            }
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .hard_deadline(Duration::from_secs(5))
    .error_policy(move |_key, err: &ReconcileError<Infallible>, _attempts| {
        t.lock().unwrap().push(err.to_string());
        Action::RequeueRateLimited
    })
    .on_event(move |e| {
        if let Event::ReconcileFinished { outcome, took, .. } = e {
            o.lock().unwrap().push((*outcome, *took));
        }
    })
    .source(|| futures::stream::iter([1]).chain(futures::stream::pending()))
    .run(shutdown);
    let summary = bounded(Duration::from_secs(60), run).await;
    let attempts = attempts.lock().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1].0, 1, "the timeout counts as a failure");
    assert_eq!(
        attempts[1].1.duration_since(attempts[0].1),
        Duration::from_secs(5) + Duration::from_millis(5),
        "dropped at the deadline, back after the limiter's first delay"
    );
    assert_eq!(
        *told.lock().unwrap(),
        ["reconcile dropped at its deadline, after 5s"]
    );
    assert_eq!(
        outcomes.lock().unwrap()[0],
        (
            ReconcileOutcome::TimedOut(Action::RequeueRateLimited),
            Duration::from_secs(5)
        )
    );
    assert_eq!((summary.timeouts, summary.successes), (1, 1));
    assert_eq!(summary.reconciles, 2);
    assert_eq!(summary.failures(), 1);
}

/// A reconcile that runs past its hard deadline without awaiting cannot be dropped: it runs
/// to its end and is reported (real time: it blocks its thread for 50 ms, the deadline is
/// 10 ms).
#[tokio::test]
async fn a_reconcile_that_never_awaits_is_reported_as_an_overrun() {
    let overran = Arc::new(Mutex::new(Vec::new()));
    let o = overran.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = Controller::new("blocking", move |_key: u32, _ctx: Context| {
        let stop = stop.clone();
        async move {
            std::thread::sleep(Duration::from_millis(50));
            stop.cancel();
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .hard_deadline(Duration::from_millis(10))
    .on_event(move |e| {
        if let Event::ReconcileOverran {
            key, deadline, ran, ..
        } = e
        {
            o.lock().unwrap().push((**key, *deadline, *ran));
        }
    })
    .source(|| futures::stream::iter([9]))
    .run(shutdown);
    let summary = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run ends");
    let overran = overran.lock().unwrap();
    assert_eq!(overran.len(), 1, "{overran:?}");
    let (key, deadline, ran) = overran[0];
    assert_eq!((key, deadline), (9, Duration::from_millis(10)));
    assert!(ran >= Duration::from_millis(50), "{ran:?}");
    assert_eq!(
        (summary.successes, summary.timeouts, summary.overruns),
        (1, 0, 1)
    );
}
