//! Replicas of a sharded controller as separate processes (the `replica` binary) on a real etcd
//! started by the test: one frozen with SIGSTOP past its leases and resumed with SIGCONT, and a
//! second process started with the identity of a live replica. Every replica prints each
//! reconcile's start (with its shard and fencing token) and end, with the wall-clock time; the
//! checks read those lines. Real time: about 25 s.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

#[path = "../../crates/leader/tests/support/etcd_server.rs"]
#[allow(dead_code)]
mod etcd_server;

use etcd_server::EtcdServer;

const SHARDS: u32 = 6;
const KEYS: u32 = 60;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// One printed line of a replica.
#[derive(Debug, Clone)]
enum Line {
    Start {
        ns: u128,
        key: u32,
        shard: u32,
        token: u64,
    },
    End {
        ns: u128,
        key: u32,
    },
    Held {
        shards: BTreeSet<u32>,
    },
}

fn parse(line: &str) -> Line {
    let f: Vec<&str> = line.split(' ').collect();
    match f[0] {
        "start" => Line::Start {
            ns: f[1].parse().unwrap(),
            key: f[2].parse().unwrap(),
            shard: f[3].parse().unwrap(),
            token: f[4].parse().unwrap(),
        },
        "end" => Line::End {
            ns: f[1].parse().unwrap(),
            key: f[2].parse().unwrap(),
        },
        "held" => Line::Held {
            shards: f
                .get(2)
                .map(|s| s.split(',').filter(|s| !s.is_empty()))
                .into_iter()
                .flatten()
                .map(|s| s.parse().unwrap())
                .collect(),
        },
        other => panic!("unexpected line {other:?}: {line}"),
    }
}

/// A replica process; killed on drop.
struct Replica {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Line>>>,
}

impl Replica {
    fn start(etcd: &str, prefix: &str, name: &str, identity: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_replica"))
            .args(["--etcd", etcd, "--identity", identity, "--prefix", prefix])
            .args(["--shards", &SHARDS.to_string(), "--keys", &KEYS.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the replica binary starts");
        let stdout = child.stdout.take().unwrap();
        let lines: Arc<Mutex<Vec<Line>>> = Arc::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push(parse(&line));
            }
        });
        Self {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }

    /// The shards it said it holds last.
    fn held(&self) -> BTreeSet<u32> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find_map(|l| match l {
                Line::Held { shards } => Some(shards.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Closes stdin (a graceful shutdown: the held shards drain) and waits up to 10 s.
    fn stop(&mut self) {
        drop(self.stdin.take());
        for _ in 0..100 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("replica {} did not shut down within 10 s", self.name);
    }

    fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `ok` holds, polling; panics with `what` past `bound`.
async fn wait_until(bound: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(start.elapsed() < bound, "{what} within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every replica holds `want` shards, and all `SHARDS` are held.
fn settled(replicas: &[&Replica], want: usize) -> bool {
    let sets: Vec<_> = replicas.iter().map(|r| r.held()).collect();
    let all: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    all.len() == SHARDS as usize && sets.iter().all(|s| s.len() == want)
}

/// One reconcile: who ran it, on which shard and token, from when to when (`None`: no end
/// line, taken as lasting to the end of the run).
#[derive(Debug, Clone)]
struct Reconcile {
    replica: String,
    key: u32,
    shard: u32,
    token: u64,
    start: u128,
    end: Option<u128>,
}

fn reconciles(replica: &Replica) -> Vec<Reconcile> {
    let mut open: HashMap<u32, usize> = HashMap::new();
    let mut out: Vec<Reconcile> = Vec::new();
    for line in replica.lines() {
        match line {
            Line::Start {
                ns,
                key,
                shard,
                token,
            } => {
                open.insert(key, out.len());
                out.push(Reconcile {
                    replica: replica.name.clone(),
                    key,
                    shard,
                    token,
                    start: ns,
                    end: None,
                });
            }
            Line::End { ns, key } => {
                if let Some(i) = open.remove(&key) {
                    out[i].end = Some(ns);
                }
            }
            Line::Held { .. } => {}
        }
    }
    out
}

/// Pairs of reconciles of one key by two replicas that overlap in time.
fn overlaps(all: &[Reconcile]) -> Vec<(Reconcile, Reconcile)> {
    let mut by_key: HashMap<u32, Vec<&Reconcile>> = HashMap::new();
    for r in all {
        by_key.entry(r.key).or_default().push(r);
    }
    let mut found = Vec::new();
    for runs in by_key.values_mut() {
        runs.sort_by_key(|r| r.start);
        for (i, a) in runs.iter().enumerate() {
            let a_end = a.end.unwrap_or(u128::MAX);
            for b in &runs[i + 1..] {
                if b.start >= a_end {
                    break;
                }
                if b.replica != a.replica {
                    found.push(((*a).clone(), (*b).clone()));
                }
            }
        }
    }
    found
}

/// A replica frozen past its leases starts no reconcile on them when it resumes: the others
/// took its shards over with larger fencing tokens, and it either waits to re-acquire a shard
/// (a larger token still) or takes none. No key is in two reconciles at once, apart from the
/// frozen replica's reconciles that were running when the freeze began (what the fencing token
/// is for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_resumed_after_a_freeze_starts_nothing_on_lost_leases() {
    let etcd = EtcdServer::start().await;
    let prefix = "/ctrlq/freeze/";
    let mut a = Replica::start(etcd.url(), prefix, "a", "a");
    let mut b = Replica::start(etcd.url(), prefix, "b", "b");
    let mut c = Replica::start(etcd.url(), prefix, "c", "c");
    wait_until(
        Duration::from_secs(20),
        "three replicas settle at 2 shards each",
        || settled(&[&a, &b, &c], 2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.signal("-STOP");
    // After the signal was sent: whatever c started before this is in flight at the freeze.
    let stopped_at = now_ns();
    // Past the settle bound after a death for c's shards (2 s + 4.2 × 0.3 s = 3.26 s).
    wait_until(Duration::from_secs(10), "a and b hold every shard", || {
        settled(&[&a, &b], 3)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let resumed_at = now_ns();
    c.signal("-CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    for r in [&mut a, &mut b, &mut c] {
        r.stop();
    }

    let (ra, rb, rc) = (reconciles(&a), reconciles(&b), reconciles(&c));
    assert!(
        rc.iter().any(|r| r.start < stopped_at),
        "c reconciled before the freeze"
    );
    // Nothing c started after it resumed ran on a term that another replica had superseded on
    // that shard before.
    let others: Vec<&Reconcile> = ra.iter().chain(&rb).collect();
    let stale: Vec<&Reconcile> = rc
        .iter()
        .filter(|r| r.start >= resumed_at)
        .filter(|r| {
            others
                .iter()
                .any(|o| o.shard == r.shard && o.token > r.token && o.start < r.start)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "{} reconciles started on lost leases after SIGCONT, the first: {:?}",
        stale.len(),
        stale.first()
    );
    // No key in two reconciles at once, leaving out c's reconciles in flight at the freeze.
    let all: Vec<Reconcile> = ra
        .iter()
        .chain(&rb)
        .chain(
            rc.iter()
                .filter(|r| !(r.start < stopped_at && r.end.is_none_or(|e| e > stopped_at))),
        )
        .cloned()
        .collect();
    let both = overlaps(&all);
    assert!(
        both.is_empty(),
        "{} overlaps, the first: {:?}",
        both.len(),
        both.first()
    );
}

/// A second process started with the identity of a live replica takes no shard and starts no
/// reconcile while the first renews; the first keeps its shards, and no key is in two
/// reconciles at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_an_identity_in_use_takes_no_shard() {
    let etcd = EtcdServer::start().await;
    let prefix = "/ctrlq/twin/";
    let mut a = Replica::start(etcd.url(), prefix, "a", "a");
    let mut b = Replica::start(etcd.url(), prefix, "b", "b");
    wait_until(
        Duration::from_secs(20),
        "two replicas settle at 3 shards each",
        || settled(&[&a, &b], 3),
    )
    .await;
    let before = a.held();
    let twin_at = now_ns();
    let mut twin = Replica::start(etcd.url(), prefix, "a-twin", "a");
    // Three lease durations: a twin that waited for a's records to expire would act by now.
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(twin.held().is_empty(), "the twin holds {:?}", twin.held());
        assert_eq!(a.held(), before, "a lost a shard to its twin");
    }
    // The twin first: once the first "a" shuts down gracefully (blanking its member record,
    // releasing its leases), the twin may rightly take its place.
    for r in [&mut twin, &mut a, &mut b] {
        r.stop();
    }
    let (ra, rb, rt) = (reconciles(&a), reconciles(&b), reconciles(&twin));
    assert!(rt.is_empty(), "the twin reconciled {} keys", rt.len());
    assert!(
        ra.iter().any(|r| r.start > twin_at + 5_000_000_000),
        "a went on reconciling"
    );
    let all: Vec<Reconcile> = ra.into_iter().chain(rb).collect();
    let both = overlaps(&all);
    assert!(
        both.is_empty(),
        "{} overlaps, the first: {:?}",
        both.len(),
        both.first()
    );
}
