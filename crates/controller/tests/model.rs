//! Property test against a simple model: whatever the changes, their timing, the reconcile
//! durations and the worker count, every object ends reconciled at its last generation, each
//! key had a reconcile start after its last change, and no key was in two reconciles at once.

mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctrlq_controller::testing::ScriptedSource;
use ctrlq_controller::{Action, Context, Controller, Drain, Event};
use proptest::prelude::*;
use support::bounded;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
enum Op {
    Apply(u8),
    Delete(u8),
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    (
        0u64..40,
        prop_oneof![4 => (0u8..8).prop_map(Op::Apply), 1 => (0u8..8).prop_map(Op::Delete)],
    )
}

#[derive(Default)]
struct Seen {
    /// Generation each key was last reconciled at.
    generation: HashMap<u8, u64>,
    /// Last reconcile start of each key.
    started: HashMap<u8, Instant>,
    in_flight: HashMap<u8, u32>,
    twice: u32,
}

fn check(ops: Vec<(u64, Op)>, durations: Vec<u64>, workers: usize) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let api = ScriptedSource::new();
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let (a, s) = (api.clone(), seen.clone());
        let calls = Arc::new(Mutex::new(0usize));
        let shutdown = CancellationToken::new();
        let source = api.clone();
        let hook = seen.clone();
        let run = Controller::new("model", move |key: u8, _ctx: Context| {
            let (api, seen) = (a.clone(), s.clone());
            let took = {
                let mut c = calls.lock().unwrap();
                *c += 1;
                Duration::from_millis(durations[*c % durations.len()])
            };
            async move {
                let generation = api.generation(&key);
                sleep(took).await;
                if let Some(g) = generation {
                    seen.lock().unwrap().generation.insert(key, g);
                }
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .source(move || source.subscribe())
        .workers(workers)
        .on_event(move |e| {
            let mut s = hook.lock().unwrap();
            match e {
                Event::ReconcileStarted { key, .. } => {
                    s.started.insert(**key, Instant::now());
                    let n = s.in_flight.entry(**key).or_default();
                    *n += 1;
                    if *n > 1 {
                        s.twice += 1;
                    }
                }
                Event::ReconcileFinished { key, .. } => {
                    *s.in_flight.get_mut(*key).unwrap() -= 1;
                }
                _ => {}
            }
        })
        .run(shutdown.clone());
        let run = tokio::spawn(run);
        let mut last_change = HashMap::new();
        for (delay, op) in ops {
            sleep(Duration::from_millis(delay)).await;
            match op {
                Op::Apply(k) => {
                    api.apply(k);
                    last_change.insert(k, Instant::now());
                }
                // Deleting a missing object changes nothing and tells no one.
                Op::Delete(k) if api.generation(&k).is_some() => {
                    api.delete(&k);
                    last_change.insert(k, Instant::now());
                }
                Op::Delete(_) => {}
            }
        }
        sleep(Duration::from_secs(10)).await;
        shutdown.cancel();
        let summary = bounded(Duration::from_secs(60), run).await.unwrap();
        prop_assert_eq!(summary.drain, Drain::Finished);
        let seen = seen.lock().unwrap();
        prop_assert_eq!(seen.twice, 0);
        for (k, g) in api.objects() {
            prop_assert_eq!(seen.generation.get(&k), Some(&g), "key {}", k);
        }
        for (k, changed) in last_change {
            // A key changed while in reconcile starts again after it; one changed while queued
            // starts later anyway. Either way some start is at or after the change.
            prop_assert!(
                seen.started.get(&k).is_some_and(|s| *s >= changed),
                "key {}",
                k
            );
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_change_is_reconciled_and_no_key_twice_at_once(
        ops in proptest::collection::vec(op(), 1..60),
        durations in proptest::collection::vec(0u64..120, 1..8),
        workers in 1usize..5,
    ) {
        check(ops, durations, workers)?;
    }
}
