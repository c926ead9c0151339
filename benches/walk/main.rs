//! The walks of a key through the workspace, run `n` times each so that `benches/walk` can
//! count, under callgrind, the calls one more key makes: `add` (add, get, done), `delayed` (a
//! delayed add, its timer, get, done), `delayed-add` (a delayed add until its timer has queued
//! the key) and `reconcile` (a key from a source through the controller's one worker and a
//! reconcile that returns `Action::Done`). Built outside the
//! workspace against the crates `benches/walk` is pointed at, so the code before a change is
//! walked by the same program.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctrlq_controller::{Action, Context, Controller};
use ctrlq_queue_async::WorkQueue;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(walk), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: walk add|delayed|reconcile N");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        match walk.as_str() {
            "delayed-add" => {
                // Each key waits out its delay and is queued; none is taken.
                let queue: WorkQueue<u64> = WorkQueue::new();
                for i in 0..n {
                    queue.add_after(i, Duration::from_secs(1)).expect("open");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                assert_eq!(queue.len(), usize::try_from(n).expect("small"));
            }
            "add" | "delayed" => {
                let queue: WorkQueue<u64> = WorkQueue::new();
                for i in 0..n {
                    if walk == "add" {
                        queue.add(i).expect("open");
                    } else {
                        queue.add_after(i, Duration::from_secs(1)).expect("open");
                    }
                    let item = queue.get().await.expect("a key");
                    assert_eq!(*item, i);
                    drop(item);
                }
            }
            "reconcile" => {
                let shutdown = CancellationToken::new();
                let reconciled = Arc::new(AtomicU64::new(0));
                let (stop, count) = (shutdown.clone(), reconciled.clone());
                let controller = Controller::new("walk", move |_key: u64, _ctx: Context| {
                    let (stop, count) = (stop.clone(), count.clone());
                    async move {
                        if count.fetch_add(1, Ordering::SeqCst) + 1 == n {
                            stop.cancel();
                        }
                        Ok::<_, std::io::Error>(Action::Done)
                    }
                })
                .source(move || futures::stream::iter(0..n).chain(futures::stream::pending()))
                .workers(1);
                assert_eq!(controller.run(shutdown).await.reconciles, n);
            }
            other => panic!("unknown walk {other:?}"),
        }
    });
}
