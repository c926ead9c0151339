//! The runner without an elector: the queue's rules, actions, failures, panics, drain.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::testing::ScriptedSource;
use ctrlq_controller::{
    Action, Context, Controller, Drain, Event, ReconcileError, ReconcileOutcome,
};
use futures::StreamExt;
use support::{Rng, bounded};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct Failed;

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failed")
    }
}

type Log<T> = Arc<Mutex<Vec<T>>>;

fn log<T>() -> Log<T> {
    Arc::new(Mutex::new(Vec::new()))
}

/// Random changes to 40 objects while 4 workers reconcile with random durations: afterwards every
/// object was last reconciled to its last generation, and no key was ever in two reconciles.
#[tokio::test(start_paused = true)]
async fn every_key_is_reconciled_after_its_last_change_and_never_twice_at_once() {
    for seed in 1..=12 {
        let api = ScriptedSource::new();
        for k in 0..40u32 {
            api.apply(k);
        }
        let reconciled: Arc<Mutex<HashMap<u32, u64>>> = Arc::default();
        let in_flight: Arc<Mutex<HashMap<u32, u32>>> = Arc::default();
        let twice = Arc::new(Mutex::new(0u32));
        let durations = Arc::new(Mutex::new(Rng::new(seed)));
        let (a, r, d) = (api.clone(), reconciled.clone(), durations.clone());
        let (f1, tw) = (in_flight.clone(), twice.clone());
        let shutdown = CancellationToken::new();
        let run = Controller::new("objects", move |key: u32, _ctx: Context| {
            let (api, reconciled) = (a.clone(), r.clone());
            let took = d.lock().unwrap().millis(80);
            async move {
                let generation = api.generation(&key);
                sleep(took).await;
                if let Some(g) = generation {
                    reconciled.lock().unwrap().insert(key, g);
                }
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .source({
            let api = api.clone();
            move || api.subscribe()
        })
        .workers(4)
        .on_event(move |e| match e {
            Event::ReconcileStarted { key, .. } => {
                let mut f = f1.lock().unwrap();
                let n = f.entry(**key).or_default();
                *n += 1;
                if *n > 1 {
                    *tw.lock().unwrap() += 1;
                }
            }
            Event::ReconcileFinished { key, .. } => {
                *f1.lock().unwrap().get_mut(key).unwrap() -= 1;
            }
            _ => {}
        })
        .run(shutdown.clone());
        let run = tokio::spawn(run);
        let mut rng = Rng::new(seed ^ 0xABCD);
        for _ in 0..300 {
            sleep(rng.millis(30)).await;
            let k = u32::try_from(rng.below(40)).unwrap();
            if rng.below(10) == 0 {
                api.delete(&k);
            } else {
                api.apply(k);
            }
        }
        sleep(Duration::from_secs(5)).await;
        shutdown.cancel();
        let summary = bounded(LIMIT, run).await.unwrap();
        assert_eq!(summary.drain, Drain::Finished);
        let reconciled = reconciled.lock().unwrap();
        for (k, g) in api.objects() {
            assert_eq!(reconciled.get(&k), Some(&g), "seed {seed}: key {k}");
        }
        assert_eq!(*twice.lock().unwrap(), 0, "seed {seed}");
    }
}

/// A key added again while its reconcile runs is reconciled once more after it, not during it.
#[tokio::test(start_paused = true)]
async fn a_key_added_during_its_reconcile_is_reconciled_again_afterwards() {
    let api = ScriptedSource::new();
    api.apply("a");
    let starts: Log<Instant> = log();
    let (s, a2) = (starts.clone(), api.clone());
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: &'static str, _ctx: Context| {
            s.lock().unwrap().push(Instant::now());
            async {
                sleep(Duration::from_secs(1)).await;
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .source(move || a2.subscribe())
        .workers(4)
        .run(shutdown.clone()),
    );
    let t0 = Instant::now();
    sleep(Duration::from_millis(500)).await;
    api.apply("a");
    sleep(Duration::from_secs(5)).await;
    shutdown.cancel();
    bounded(LIMIT, run).await.unwrap();
    let starts = starts.lock().unwrap();
    assert_eq!(starts.len(), 2);
    assert_eq!(
        starts[1] - t0,
        Duration::from_secs(1),
        "right after the first one"
    );
}

/// Shutdown with reconciles in flight: no new keys start, the in-flight ones finish within the
/// grace period, their tokens fired, and `run` returns a summary.
#[tokio::test(start_paused = true)]
async fn drain_finishes_in_flight_reconciles_and_returns_a_summary() {
    let tokens_fired: Log<bool> = log();
    let t = tokens_fired.clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, ctx: Context| {
            let t = t.clone();
            async move {
                sleep(Duration::from_secs(2)).await;
                t.lock().unwrap().push(ctx.token().is_cancelled());
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .source(|| futures::stream::iter(0..10))
        .workers(4)
        .grace_period(Duration::from_secs(10))
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(1)).await;
    let t0 = Instant::now();
    shutdown.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(1),
        "the rest of the reconciles"
    );
    assert_eq!(
        summary.reconciles, 4,
        "the 4 in flight; the 6 queued never start"
    );
    assert_eq!(summary.successes, 4);
    assert_eq!(summary.aborted, 0);
    assert_eq!(summary.drain, Drain::Finished);
    assert_eq!(summary.terms, 1);
    assert_eq!(*tokens_fired.lock().unwrap(), [true; 4]);
}

/// A reconcile that outlives the grace period is dropped when it runs out.
#[tokio::test(start_paused = true)]
async fn drain_drops_reconciles_when_the_grace_period_runs_out() {
    let outcomes: Log<ReconcileOutcome> = log();
    let o = outcomes.clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("objects", |_key: u32, _ctx: Context| async {
            sleep(Duration::from_secs(60)).await;
            Ok::<_, Infallible>(Action::Done)
        })
        .source(|| futures::stream::iter([1]))
        .grace_period(Duration::from_secs(3))
        .on_event(move |e| {
            if let Event::ReconcileFinished { outcome, .. } = e {
                o.lock().unwrap().push(*outcome);
            }
        })
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(1)).await;
    let t0 = Instant::now();
    shutdown.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!(Instant::now() - t0, Duration::from_secs(3));
    assert_eq!(summary.aborted, 1);
    assert_eq!(summary.reconciles, 0);
    assert_eq!(summary.drain, Drain::CutShort);
    assert_eq!(*outcomes.lock().unwrap(), [ReconcileOutcome::Aborted]);
}

/// A reconcile that panics three times is retried after 5, 10 and 20 ms (the default limiter's
/// exponential part), sees its attempts count, and finally succeeds; the panics are counted.
#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_retried_with_backoff() {
    let starts: Log<(Instant, u32)> = log();
    let s = starts.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let policy_saw: Log<String> = log();
    let p = policy_saw.clone();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, ctx: Context| {
            s.lock().unwrap().push((Instant::now(), ctx.attempts()));
            let stop = stop.clone();
            async move {
                assert!(ctx.attempts() >= 3, "panic number {}", ctx.attempts() + 1);
                stop.cancel();
                Ok::<_, Failed>(Action::Done)
            }
        })
        .source(|| futures::stream::iter([7]))
        .error_policy(move |_key, err, _attempts| {
            p.lock().unwrap().push(err.to_string());
            Action::RequeueRateLimited
        })
        .run(shutdown.clone()),
    );
    let summary = bounded(LIMIT, run).await.unwrap();
    let starts = starts.lock().unwrap();
    let gaps: Vec<_> = starts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert_eq!(gaps, [5, 10, 20].map(Duration::from_millis));
    assert_eq!(starts.iter().map(|s| s.1).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(summary.panics, 3);
    assert_eq!(summary.successes, 1);
    assert_eq!(summary.reconciles, 4);
    assert_eq!(policy_saw.lock().unwrap().len(), 3);
    assert!(policy_saw.lock().unwrap()[0].starts_with("reconcile panicked: panic number 1"));
}

/// A panic while building the reconcile future (before its first poll) is caught the same way.
#[tokio::test(start_paused = true)]
async fn a_panic_before_the_future_is_built_is_caught_too() {
    let calls = Arc::new(Mutex::new(0));
    let c = calls.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, _ctx: Context| {
            let n = {
                let mut c = c.lock().unwrap();
                *c += 1;
                *c
            };
            assert!(n > 1, "first call panics synchronously");
            stop.cancel();
            async { Ok::<_, Failed>(Action::Done) }
        })
        .source(|| futures::stream::iter([1]))
        .run(shutdown.clone()),
    );
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!((summary.panics, summary.successes), (1, 1));
}

/// Each key's attempts (in its context, its started event and the error policy) count its own
/// failures in a row, whatever the other keys do: rate-limited requeues and errors add one,
/// `RequeueAfter` and `Done` clear them. Checked with the queue's own limiter and with one given.
#[tokio::test(start_paused = true)]
async fn attempts_count_each_keys_own_failures_in_a_row() {
    // Per key, its reconciles' outcomes: E an error (the policy requeues it rate-limited),
    // R `RequeueRateLimited`, A `RequeueAfter`, D `Done` (the last).
    const SCRIPTS: [&str; 6] = ["D", "EAD", "REERAD", "ARD", "EEEEAAD", "RAEAD"];
    for given_limiter in [false, true] {
        let calls: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
        // (key, where it was seen, attempts seen, attempts expected)
        let seen: Log<(usize, &'static str, u32, u32)> = log();
        let expected = |key: usize, call: usize| {
            let before = &SCRIPTS[key].as_bytes()[..call];
            before
                .iter()
                .rev()
                .take_while(|&&c| c == b'E' || c == b'R')
                .count() as u32
        };
        let (c, s) = (calls.clone(), seen.clone());
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let mut controller = Controller::new("objects", move |key: usize, ctx: Context| {
            let call = {
                let mut c = c.lock().unwrap();
                let n = c.entry(key).or_default();
                *n += 1;
                *n - 1
            };
            s.lock()
                .unwrap()
                .push((key, "context", ctx.attempts(), expected(key, call)));
            let (stop, c) = (stop.clone(), c.clone());
            async move {
                sleep(Duration::from_millis(3 * key as u64 + 1)).await;
                match SCRIPTS[key].as_bytes()[call] {
                    b'E' => Err(Failed),
                    b'R' => Ok(Action::RequeueRateLimited),
                    b'A' => Ok(Action::requeue_after(Duration::from_millis(2))),
                    _ => {
                        let c = c.lock().unwrap();
                        let done = (0..SCRIPTS.len())
                            .all(|k| c.get(&k).copied().unwrap_or(0) == SCRIPTS[k].len());
                        if done {
                            stop.cancel();
                        }
                        Ok(Action::Done)
                    }
                }
            }
        })
        .source(|| futures::stream::iter(0..SCRIPTS.len()))
        .workers(3);
        let (c, s) = (calls.clone(), seen.clone());
        controller = controller.error_policy(move |key, _err, attempts| {
            let call = c.lock().unwrap()[key] - 1;
            s.lock()
                .unwrap()
                .push((*key, "policy", attempts, expected(*key, call)));
            Action::RequeueRateLimited
        });
        let (c, s) = (calls.clone(), seen.clone());
        controller = controller.on_event(move |e| {
            if let Event::ReconcileStarted { key, attempts } = e {
                let call = c.lock().unwrap().get(*key).copied().unwrap_or(0);
                s.lock()
                    .unwrap()
                    .push((**key, "event", *attempts, expected(**key, call)));
            }
        });
        if given_limiter {
            controller = controller
                .rate_limiter(Arc::new(ctrlq_ratelimit::default_controller_rate_limiter()));
        }
        let summary = bounded(LIMIT, tokio::spawn(controller.run(shutdown.clone())))
            .await
            .unwrap();
        let seen = seen.lock().unwrap();
        let total: usize = SCRIPTS.iter().map(|s| s.len()).sum();
        assert_eq!(summary.reconciles, total as u64);
        assert_eq!(
            seen.len(),
            2 * total + SCRIPTS.concat().matches('E').count()
        );
        for &(key, at, got, want) in seen.iter() {
            assert_eq!(got, want, "key {key}, {at}, given limiter: {given_limiter}");
        }
    }
}

/// `RequeueAfter` brings the key back at that time and forgets its failures.
#[tokio::test(start_paused = true)]
async fn requeue_after_lands_at_that_time_and_forgets_failures() {
    let starts: Log<(Instant, u32)> = log();
    let s = starts.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, ctx: Context| {
            let n = {
                let mut s = s.lock().unwrap();
                s.push((Instant::now(), ctx.attempts()));
                s.len()
            };
            let stop = stop.clone();
            async move {
                match n {
                    1 | 2 => Err(Failed),
                    3 => Ok(Action::requeue_after(Duration::from_secs(7))),
                    _ => {
                        stop.cancel();
                        Ok(Action::Done)
                    }
                }
            }
        })
        .source(|| futures::stream::iter([1]))
        .run(shutdown.clone()),
    );
    let summary = bounded(LIMIT, run).await.unwrap();
    let starts = starts.lock().unwrap();
    assert_eq!(starts.len(), 4);
    assert_eq!(starts[3].0 - starts[2].0, Duration::from_secs(7));
    assert_eq!(
        starts.iter().map(|s| s.1).collect::<Vec<_>>(),
        [0, 1, 2, 0],
        "the requeue-after forgot the two failures"
    );
    assert_eq!((summary.errors, summary.successes), (2, 2));
}

/// The error policy receives the key, the error and the attempts, and its action is applied.
#[tokio::test(start_paused = true)]
async fn the_error_policy_decides_and_a_panicking_policy_falls_back_to_rate_limited() {
    let starts: Log<Instant> = log();
    let s = starts.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let seen: Log<(u32, bool, u32)> = log();
    let p = seen.clone();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, _ctx: Context| {
            let n = {
                let mut s = s.lock().unwrap();
                s.push(Instant::now());
                s.len()
            };
            if n == 3 {
                stop.cancel();
            }
            async { Err::<Action, _>(Failed) }
        })
        .source(|| futures::stream::iter([9]))
        .error_policy(move |key, err: &ReconcileError<Failed>, attempts| {
            let calls = {
                let mut p = p.lock().unwrap();
                p.push((*key, err.failed().is_some(), attempts));
                p.len()
            };
            assert!(calls == 1, "the policy panics at its second call");
            Action::requeue_after(Duration::from_secs(60))
        })
        .grace_period(Duration::ZERO)
        .run(shutdown.clone()),
    );
    bounded(LIMIT, run).await.unwrap();
    let starts = starts.lock().unwrap();
    assert_eq!(starts[1] - starts[0], Duration::from_secs(60));
    assert_eq!(
        starts[2] - starts[1],
        Duration::from_millis(5),
        "rate-limited"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [(9, true, 0), (9, true, 0), (9, true, 1)],
        "the requeue-after forgot the first failure; the fallback charged the limiter"
    );
}

/// Several sources are merged; a key in two of them is one queue entry.
#[tokio::test(start_paused = true)]
async fn several_sources_are_merged() {
    let keys: Log<u32> = log();
    let k = keys.clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("objects", move |key: u32, _ctx: Context| {
            k.lock().unwrap().push(key);
            async { Ok::<_, Infallible>(Action::Done) }
        })
        .source(|| futures::stream::iter([1, 2]))
        .source(|| futures::stream::iter([3]))
        .workers(2)
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(1)).await;
    shutdown.cancel();
    bounded(LIMIT, run).await.unwrap();
    let mut keys = keys.lock().unwrap().clone();
    keys.sort_unstable();
    assert_eq!(keys, [1, 2, 3]);
}

/// Sets its flag when dropped.
struct DropFlag(Arc<Mutex<bool>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = true;
    }
}

/// Without an elector the fencing token is absent. Cancel safety: dropping `run` drops the
/// workers with their in-flight reconciles, and the sources.
#[tokio::test(start_paused = true)]
async fn without_an_elector_there_is_no_fencing_token_and_dropping_run_drops_everything() {
    let fencing: Log<Option<u64>> = log();
    let (reconcile_dropped, source_dropped) =
        (Arc::new(Mutex::new(false)), Arc::new(Mutex::new(false)));
    let (f, rd, sd) = (
        fencing.clone(),
        reconcile_dropped.clone(),
        source_dropped.clone(),
    );
    let run = Controller::new("objects", move |_key: u32, ctx: Context| {
        f.lock().unwrap().push(ctx.fencing_token());
        let flag = DropFlag(rd.clone());
        async move {
            let _flag = flag;
            sleep(Duration::from_secs(3600)).await;
            Ok::<_, Infallible>(Action::Done)
        }
    })
    .source(move || {
        let flag = DropFlag(sd.clone());
        futures::stream::iter([1])
            .chain(futures::stream::pending())
            .inspect(move |_| {
                let _ = &flag;
            })
    })
    .run(CancellationToken::new());
    let handle = tokio::spawn(run);
    sleep(Duration::from_secs(1)).await;
    assert!(!*reconcile_dropped.lock().unwrap());
    handle.abort();
    assert!(handle.await.unwrap_err().is_cancelled());
    // The aborted tasks are dropped by the runtime once it gets to them.
    bounded(Duration::from_secs(1), async {
        while !(*reconcile_dropped.lock().unwrap() && *source_dropped.lock().unwrap()) {
            sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(*fencing.lock().unwrap(), [None]);
}

/// A limiter given to the controller paces its rate-limited requeues.
#[tokio::test(start_paused = true)]
async fn the_given_rate_limiter_paces_retries() {
    let starts: Log<Instant> = log();
    let s = starts.clone();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let limiter = ctrlq_ratelimit::ExponentialRateLimiter::new(
        Duration::from_secs(3),
        Duration::from_secs(3),
    )
    .unwrap();
    let run = tokio::spawn(
        Controller::new("objects", move |_key: u32, _ctx: Context| {
            let n = {
                let mut s = s.lock().unwrap();
                s.push(Instant::now());
                s.len()
            };
            if n == 3 {
                stop.cancel();
            }
            async { Err::<Action, _>(Failed) }
        })
        .source(|| futures::stream::iter([1]))
        .rate_limiter(Arc::new(limiter))
        .grace_period(Duration::ZERO)
        .run(shutdown.clone()),
    );
    bounded(LIMIT, run).await.unwrap();
    let starts = starts.lock().unwrap();
    let gaps: Vec<_> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [Duration::from_secs(3); 2]);
}

/// What a reconcile that never awaits returns.
type Done = std::future::Ready<Result<Action, Infallible>>;

/// Reconciles every key it is given; stops the run once it has seen `want` distinct keys.
fn collecting(
    want: usize,
    shutdown: &CancellationToken,
) -> (
    Log<u32>,
    impl Fn(u32, Context) -> Done + Send + Sync + 'static,
) {
    let seen = log();
    let (s, stop) = (seen.clone(), shutdown.clone());
    let reconcile = move |key: u32, _ctx: Context| {
        let mut s = s.lock().unwrap();
        if !s.contains(&key) {
            s.push(key);
        }
        if s.len() == want {
            stop.cancel();
        }
        std::future::ready(Ok(Action::Done))
    };
    (seen, reconcile)
}

/// A source that yields three keys and then panics: all three are reconciled, the failure is
/// reported, and the source is subscribed again after the backoff (its second stream's key is
/// reconciled too).
#[tokio::test(start_paused = true)]
async fn keys_a_source_yielded_before_it_panicked_are_reconciled_and_it_is_resubscribed() {
    let shutdown = CancellationToken::new();
    let (seen, reconcile) = collecting(4, &shutdown);
    let subscriptions = Arc::new(Mutex::new(Vec::new()));
    let subs = subscriptions.clone();
    let events = log();
    let ev = events.clone();
    let summary = bounded(
        LIMIT,
        Controller::new("panicky", reconcile)
            .source(move || {
                let mut subs = subs.lock().unwrap();
                subs.push(Instant::now());
                if subs.len() == 1 {
                    futures::stream::iter([1, 2, 3])
                        .chain(futures::stream::once(async { panic!("boom") }))
                        .boxed()
                } else {
                    futures::stream::iter([4])
                        .chain(futures::stream::pending())
                        .boxed()
                }
            })
            .on_event(move |e| {
                if let Event::SourceFailed {
                    source,
                    failure,
                    retry_in,
                } = e
                {
                    ev.lock()
                        .unwrap()
                        .push((*source, failure.to_string(), *retry_in));
                }
            })
            .run(shutdown),
    )
    .await;
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3, 4]);
    assert_eq!(
        *events.lock().unwrap(),
        [(0, "panicked: boom".to_owned(), Duration::from_secs(1))]
    );
    let subs = subscriptions.lock().unwrap();
    assert_eq!(subs.len(), 2);
    assert_eq!(
        subs[1] - subs[0],
        Duration::from_secs(1),
        "after the backoff"
    );
    assert_eq!((summary.source_failures, summary.source_errors), (1, 0));
}

/// A `try_source`'s errors are reported and the stream goes on; one that ends right after an
/// error is subscribed again, with a backoff that doubles while it keeps failing.
#[tokio::test(start_paused = true)]
async fn a_try_source_reports_errors_and_is_resubscribed_when_it_ends_after_one() {
    let shutdown = CancellationToken::new();
    let (seen, reconcile) = collecting(4, &shutdown);
    let subscriptions = Arc::new(Mutex::new(Vec::new()));
    let subs = subscriptions.clone();
    let events = log();
    let ev = events.clone();
    let summary = bounded(
        LIMIT,
        Controller::new("flaky", reconcile)
            .try_source(move || {
                let mut subs = subs.lock().unwrap();
                subs.push(Instant::now());
                match subs.len() {
                    1 => futures::stream::iter([Ok(1), Err("gone"), Ok(2), Err("expired")]).boxed(),
                    2 => futures::stream::iter([Err("still down")]).boxed(),
                    _ => futures::stream::iter([Ok(3), Ok(4)])
                        .chain(futures::stream::pending())
                        .boxed(),
                }
            })
            .on_event(move |e| match e {
                Event::SourceError { error, .. } => {
                    ev.lock().unwrap().push(format!("error {error}"))
                }
                Event::SourceFailed {
                    failure, retry_in, ..
                } => ev
                    .lock()
                    .unwrap()
                    .push(format!("failed {failure} {retry_in:?}")),
                _ => {}
            })
            .run(shutdown),
    )
    .await;
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3, 4]);
    assert_eq!(
        *events.lock().unwrap(),
        [
            "error gone",
            "error expired",
            "failed ended after an error: expired 1s",
            "error still down",
            "failed ended after an error: still down 2s",
        ]
    );
    let subs = subscriptions.lock().unwrap();
    assert_eq!(subs.len(), 3);
    assert_eq!(subs[1] - subs[0], Duration::from_secs(1));
    assert_eq!(subs[2] - subs[1], Duration::from_secs(2));
    assert_eq!((summary.source_failures, summary.source_errors), (2, 3));
}

/// A source that ends after its keys is done for the term: not subscribed again.
#[tokio::test(start_paused = true)]
async fn a_source_that_ends_after_its_keys_is_not_resubscribed() {
    let shutdown = CancellationToken::new();
    let subscriptions = Arc::new(Mutex::new(0u32));
    let subs = subscriptions.clone();
    let stop = shutdown.clone();
    let summary = Controller::new("finite", |_k: u32, _ctx: Context| async {
        Ok::<_, Infallible>(Action::Done)
    })
    .source(move || {
        *subs.lock().unwrap() += 1;
        futures::stream::iter([1, 2])
    })
    .run(shutdown);
    let run = tokio::spawn(summary);
    sleep(Duration::from_secs(120)).await;
    stop.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!(summary.reconciles, 2);
    assert_eq!(*subscriptions.lock().unwrap(), 1);
    assert_eq!(summary.source_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_never_led_reports_no_drain_rather_than_a_failed_one() {
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    let store = MemoryStore::new();
    let holder = LeaderElector::new(store.lock("b"), LeaderElectionConfig::default()).unwrap();
    let holding = tokio::spawn(async move {
        holder
            .run(CancellationToken::new(), |l| async move {
                l.token().cancelled().await
            })
            .await
    });
    sleep(Duration::from_secs(1)).await;
    let follower = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("pods", |_k: u32, _c: Context| async {
            Ok::<_, Infallible>(Action::Done)
        })
        .source(|| futures::stream::iter([1u32]))
        .leader_elector(Arc::new(follower))
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(5)).await;
    shutdown.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!((summary.terms, summary.drain), (0, Drain::NotLeading));
    holding.abort();
}

#[tokio::test(start_paused = true)]
async fn a_leader_s_drain_at_shutdown_is_reported_as_finished() {
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, MemoryStore};
    let store = MemoryStore::new();
    let leader = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("pods", |_k: u32, _c: Context| async {
            Ok::<_, Infallible>(Action::Done)
        })
        .source(|| futures::stream::iter([1u32]))
        .leader_elector(Arc::new(leader))
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(5)).await;
    shutdown.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    assert_eq!(
        (summary.terms, summary.reconciles, summary.drain),
        (1, 1, Drain::Finished)
    );
}

/// A worker resumed after a freeze (the clock moved past the lease's renew deadline while no
/// task ran) starts no reconcile on the lease until the elector has renewed it. Here another
/// candidate took the lease during the freeze: the next key waits, the term ends as lost, and
/// the key is reconciled only in the next term, under a larger fencing token.
#[tokio::test(start_paused = true)]
async fn after_a_freeze_no_reconcile_starts_on_a_lease_taken_meanwhile() {
    use ctrlq_leader::{LeaderElectionConfig, LeaderElector, Lock, MemoryStore};
    use futures::FutureExt;
    let store = MemoryStore::new();
    let leader = LeaderElector::new(store.lock("a"), LeaderElectionConfig::default()).unwrap();
    let started: Log<(u32, Option<u64>)> = log();
    let (seen, thief) = (started.clone(), Arc::new(store.lock("b")));
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(
        Controller::new("pods", move |key: u32, ctx: Context| {
            let (seen, thief) = (seen.clone(), thief.clone());
            async move {
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.push((key, ctx.fencing_token()));
                    seen.len() == 1
                };
                if first {
                    // The first reconcile pends once, so the worker does not yield after it.
                    sleep(Duration::from_millis(1)).await;
                    // Another candidate takes the lease while this process is frozen...
                    let mut record = thief.get().await.unwrap().record;
                    record.holder_identity = "b".to_owned();
                    thief.update(record).await.unwrap();
                    // ...and the clock moves on with no other task run.
                    let _ = tokio::time::advance(Duration::from_secs(30)).now_or_never();
                }
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .source(|| futures::stream::iter([1u32, 2]).chain(futures::stream::pending()))
        .leader_elector(Arc::new(leader))
        .run(shutdown.clone()),
    );
    sleep(Duration::from_secs(60)).await;
    shutdown.cancel();
    let summary = bounded(LIMIT, run).await.unwrap();
    let started = started.lock().unwrap();
    assert_eq!(started[0].0, 1, "{started:?}");
    let first = started[0].1;
    assert!(
        started.iter().any(|(key, _)| *key == 2),
        "reconciled in the next term: {started:?}"
    );
    assert!(
        started
            .iter()
            .filter(|(key, _)| *key == 2)
            .all(|(_, token)| *token > first),
        "key 2 started only on a newer lease: {started:?}"
    );
    assert_eq!(summary.leases_lost, 1);
}
