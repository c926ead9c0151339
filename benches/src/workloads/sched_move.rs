//! `sched-move`: 10,000 and 100,000 items in unschedulable, moved to active or backoff by one
//! event.
//!
//! Like kube-scheduler's `BenchmarkMoveAllToActiveOrBackoffQueue` "worst" case: 20 plugins all
//! registered for the event (every hint answers `Queue`); item j was rejected by plugin j % 20.
//! Keys are `Arc<str>`. The median of 7 moves per size (`REPS`) is reported.
//!
//! In that setup each item fails right after it is added, so the items reach unschedulable in
//! the order they were allocated, and their memory is read in address order. A third figure
//! (`us_per_item_large_shuffled`) adds all items first with random priorities (splitmix64, the
//! seed), then pops and fails each: they reach unschedulable in an order unrelated to their
//! addresses, as in a scheduler whose pods fail in a different order than they arrived.
//!
//! `floor_us_per_item_small` / `_large` and `floor_growth` time, in the same run, a loop that
//! only moves memory: per item it reads a record the size of an unschedulable slot and a
//! 160-byte box (the size of an item's boxed bookkeeping), both laid out in address order, and
//! appends a 24-byte record (an expiry and an index) to a vector that keeps its memory from
//! one rep to the next. That is less memory traffic than a move over this layout can do (read
//! each item, which its hints are handed, and its rejectors; record where it went), with no
//! hashing, no hint and no heap order. How much it grows from the small size to the large one
//! is the machine's part of `growth`.
//!
//! `faults_per_item_small` / `_large` count the minor page faults taken during the `REPS` moves
//! of each size, per moved item. The destination heap's memory is new: whether the allocator
//! reuses what an earlier run freed or takes fresh pages from the OS (one fault per 4 KiB)
//! depends on its trimming thresholds, not on the queue, and a fault costs about as much as
//! moving several items. Equal figures at both sizes mean faults do not explain the growth.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ctrlq_queue_async::scheduling::{
    ActionType, ClusterEvent, QueuedItem, QueueingHint, SchedulingQueue, SchedulingQueueConfig,
};

use crate::common::{
    Extra, Overrides, Params, Report, SplitMix64, cpu_time, key, minor_faults, runtime,
};

const NODE_ADD: ClusterEvent = ClusterEvent::new("Node", ActionType::ADD);
const PLUGINS: [&str; 20] = [
    "p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "p13", "p14",
    "p15", "p16", "p17", "p18", "p19",
];

type Queue = SchedulingQueue<Arc<str>, i64>;

/// Moves timed per size; the median is reported.
///
/// Single moves of one binary vary up to 2x on the 2-core machine (10,000 items: 1.0–3.3 ms),
/// and `growth` is the ratio of two such medians: with 3 reps it ranged from 8x to 15x between
/// runs (2026-11-23). Each rep also builds its queue in memory the previous rep freed, so reps
/// after the first read items less in allocation order. Set `SCHED_MOVE_TRACE` to print every
/// rep to stderr.
const REPS: usize = 7;

/// Long enough that no backoff ends while a queue is built and moved, at any size: at
/// 1,000,000 items the build takes about 0.9 s, and with the default 1 s the queue's flush task
/// moved items from backoff to active during the timed move, on the other thread.
const BACKOFF: Duration = Duration::from_secs(600);

fn queue_with_hints() -> Queue {
    let config = SchedulingQueueConfig::default()
        .pop_from_backoff(false)
        .initial_backoff(BACKOFF)
        .max_backoff(BACKOFF);
    let mut builder = Queue::builder(config);
    for p in PLUGINS {
        builder = builder.hint(NODE_ADD, p, |_, _, _| Ok(QueueingHint::Queue));
    }
    builder.build().expect("valid config")
}

/// A queue holding `keys` in unschedulable, each rejected by one plugin.
pub async fn unschedulable_queue(keys: &[Arc<str>]) -> Queue {
    let queue = queue_with_hints();
    for (j, k) in keys.iter().enumerate() {
        queue.add(k.clone(), (j % 4) as i64).unwrap();
        pop_and_reject(&queue, j).await;
    }
    queue
}

/// Pops the head and hands it back rejected by plugin `j % 20`.
async fn pop_and_reject(queue: &Queue, j: usize) {
    let mut item = queue.pop().await.expect("the queue is open");
    item.set_rejectors([PLUGINS[j % 20]]);
    let cycle = queue.scheduling_cycle();
    queue
        .add_unschedulable_if_not_present(item, cycle)
        .expect("not queued");
}

/// Like [`unschedulable_queue`], but all keys are added first with random priorities, then
/// popped (in priority order) and failed, so unschedulable holds them in an order unrelated
/// to where their memory is.
pub async fn shuffled_unschedulable_queue(keys: &[Arc<str>], seed: u64) -> Queue {
    let queue = queue_with_hints();
    let mut rng = SplitMix64::new(seed);
    for k in keys {
        queue.add(k.clone(), (rng.next() >> 2) as i64).unwrap();
    }
    for j in 0..keys.len() {
        pop_and_reject(&queue, j).await;
    }
    queue
}

/// Moves everything once; the seconds it took and whether every item moved.
pub async fn move_once(queue: &Queue, n: usize) -> (f64, bool) {
    let t = Instant::now();
    let moved = queue.move_all(&NODE_ADD);
    (
        t.elapsed().as_secs_f64(),
        moved == n && queue.num_unschedulable() == 0,
    )
}

/// An unschedulable slot: an item and its key's hash.
type SlotLike = (u64, QueuedItem<Arc<str>, i64>);

/// The bytes of an item's boxed bookkeeping (gate, counts, two plugin sets, two instants).
#[derive(Clone, Copy)]
struct BoxLike([u64; 20]);

/// Memory laid out like a queue of `n` unschedulable items: slots, and boxes allocated in the
/// same order.
struct FloorInput {
    slots: Vec<[u8; std::mem::size_of::<SlotLike>()]>,
    #[expect(
        clippy::vec_box,
        reason = "one allocation per box, spaced as the allocator spaces the items' boxes"
    )]
    boxes: Vec<Box<BoxLike>>,
}

impl FloorInput {
    fn new(n: usize) -> Self {
        let mut slots = Vec::with_capacity(n);
        let mut boxes = Vec::with_capacity(n);
        for i in 0..n {
            slots.push([i as u8; std::mem::size_of::<SlotLike>()]);
            boxes.push(Box::new(BoxLike([i as u64; 20])));
        }
        FloorInput { slots, boxes }
    }
}

/// The memory-only loop of the module docs over `input`, appending to `out` (cleared first);
/// the seconds it took.
fn floor_once(input: &FloorInput, out: &mut Vec<[u64; 3]>) -> f64 {
    out.clear();
    out.reserve(input.slots.len());
    let t = Instant::now();
    for (i, (slot, boxed)) in input.slots.iter().zip(&input.boxes).enumerate() {
        // One word from each cache line of the slot, and the words a move reads of the box.
        let mut x = 0u64;
        for line in slot.chunks(64) {
            x ^= u64::from(line[0]);
        }
        x = x.wrapping_add(boxed.0[0]).wrapping_add(boxed.0[8]);
        out.push([x, boxed.0[12], i as u64]);
    }
    let s = t.elapsed().as_secs_f64();
    black_box(out);
    s
}

/// The median of `times` (`REPS` of them).
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Runs the workload (`--n` is the larger size; the smaller is n / 10).
pub fn run(flags: &Overrides) -> Report {
    let params = flags.resolve(Params {
        n: 100_000,
        ..Params::defaults()
    });
    let big: Vec<Arc<str>> = (0..params.n).map(|i| Arc::from(key(i))).collect();
    runtime().block_on(async move {
        let mut ok = true;
        let mut cpu = 0.0;
        let mut medians = Vec::new();
        let mut faults = Vec::new();
        for n in [big.len() / 10, big.len()] {
            let mut times = Vec::new();
            let mut size_faults = 0;
            for _ in 0..REPS {
                let queue = unschedulable_queue(&big[..n]).await;
                let (cpu0, faults0) = (cpu_time(), minor_faults());
                let (s, moved) = move_once(&queue, n).await;
                cpu += (cpu_time() - cpu0).as_secs_f64();
                size_faults += minor_faults() - faults0;
                ok &= moved;
                times.push(s);
                if std::env::var_os("SCHED_MOVE_TRACE").is_some() {
                    eprintln!("n {n} rep {:.3} us/item", s * 1e6 / n as f64);
                }
            }
            medians.push((n, median(times)));
            faults.push(size_faults as f64 / (REPS * n) as f64);
        }
        let mut out = Vec::new();
        let floors: Vec<f64> = medians
            .iter()
            .map(|&(n, _)| {
                let times = (0..REPS)
                    .map(|_| floor_once(&FloorInput::new(n), &mut out))
                    .collect();
                median(times)
            })
            .collect();
        drop(out);
        let mut shuffled = Vec::new();
        for _ in 0..REPS {
            let queue = shuffled_unschedulable_queue(&big, params.seed).await;
            let (s, moved) = move_once(&queue, big.len()).await;
            ok &= moved;
            shuffled.push(s);
        }
        let shuffled = median(shuffled);
        let (small_n, small_s) = medians[0];
        let (big_n, big_s) = medians[1];
        Report {
            workload: "sched-move",
            params,
            seconds: big_s,
            ops_per_sec: big_n as f64 / big_s,
            extra: vec![
                ("ok", Extra::Bool(ok)),
                ("cpu_s", Extra::Num(cpu)),
                ("ms_small", Extra::Num(small_s * 1e3)),
                ("ms_large", Extra::Num(big_s * 1e3)),
                (
                    "us_per_item_small",
                    Extra::Num(small_s * 1e6 / small_n as f64),
                ),
                ("us_per_item_large", Extra::Num(big_s * 1e6 / big_n as f64)),
                ("growth", Extra::Num(big_s / small_s)),
                (
                    "us_per_item_large_shuffled",
                    Extra::Num(shuffled * 1e6 / big_n as f64),
                ),
                (
                    "floor_us_per_item_small",
                    Extra::Num(floors[0] * 1e6 / small_n as f64),
                ),
                (
                    "floor_us_per_item_large",
                    Extra::Num(floors[1] * 1e6 / big_n as f64),
                ),
                ("floor_growth", Extra::Num(floors[1] / floors[0])),
                ("faults_per_item_small", Extra::Num(faults[0])),
                ("faults_per_item_large", Extra::Num(faults[1])),
            ],
        }
    })
}
