//! A tour of `queue-core`: a scheduler-style keyed heap and the work-queue state machine.
//!
//! Run with `cargo run -p examples --example queue_core`.

use std::cmp::Ordering;

use ctrlq_queue_core::{AddOutcome, DoneOutcome, KeyedHeap, PopOutcome, WorkState};

/// A pending item as a scheduler sees it: higher priority first, then the older arrival.
#[derive(Debug, Clone, Copy)]
struct Pending {
    priority: i32,
    arrival: u64,
}

fn by_priority(a: &Pending, b: &Pending) -> Ordering {
    b.priority.cmp(&a.priority).then(a.arrival.cmp(&b.arrival))
}

fn main() {
    println!("== KeyedHeap: pending pods, highest priority first ==");
    let mut pending = KeyedHeap::new(by_priority);
    let pods = [
        ("ns/web-1", 10),
        ("ns/batch-7", 1),
        ("ns/web-2", 10),
        ("ns/db-0", 100),
    ];
    for (arrival, (name, priority)) in pods.into_iter().enumerate() {
        pending.add(
            name,
            Pending {
                priority,
                arrival: arrival as u64,
            },
        );
    }
    // The batch job gets promoted: re-ordered in place, no scan.
    pending.update("ns/batch-7", |p| p.priority = 50);
    // One pod is deleted before it is scheduled.
    pending.delete("ns/web-2");
    while let Some((name, p)) = pending.pop() {
        println!("  pop {name:<12} priority {:>3}", p.priority);
    }

    println!("\n== WorkState: de-duplication and exclusion ==");
    let mut work = WorkState::new();
    for key in ["ns/a", "ns/b", "ns/a"] {
        let outcome = work.add(key);
        println!("  add {key}: {outcome:?}");
    }
    let PopOutcome::Item(first) = work.pop() else {
        unreachable!("two keys are queued")
    };
    println!("  pop -> {first} (now processing)");
    println!("  add {first} while processing: {:?}", work.add(first));
    println!("  done {first}: {:?}", work.done(first));
    work.shut_down();
    println!("  add ns/c after shut down: {:?}", work.add("ns/c"));
    loop {
        match work.pop() {
            PopOutcome::Item(key) => {
                let done = work.done(key);
                println!("  pop -> {key}, done: {done:?}");
                assert_eq!(done, DoneOutcome::Finished);
            }
            PopOutcome::Empty => unreachable!("shut down: pop never reports empty"),
            PopOutcome::ShutDown => break println!("  pop -> shut down, all work done"),
        }
    }
    assert!(work.is_idle());
    assert!(matches!(work.add("late"), AddOutcome::ShutDown("late")));
}
