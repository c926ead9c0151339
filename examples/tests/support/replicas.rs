//! The harness of the multi-process tests: `replica` processes (the binary), their printed
//! lines, the reconciles read from them, and the checks on those.

#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub(crate) const SHARDS: u32 = 6;
pub(crate) const KEYS: u32 = 60;

pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// One printed line of a replica.
#[derive(Debug, Clone)]
pub(crate) enum Line {
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
        at: u128,
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
            at: f[1].parse().unwrap(),
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
pub(crate) struct Replica {
    pub(crate) name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Line>>>,
}

impl Replica {
    /// A replica on etcd at `etcd`.
    pub(crate) fn start(etcd: &str, prefix: &str, name: &str, identity: &str) -> Self {
        Self::spawn(&["--etcd", etcd], prefix, name, identity)
    }

    /// A replica started with `backend`'s flags (`--etcd URL` or `--kube URL ...`).
    pub(crate) fn spawn(backend: &[&str], prefix: &str, name: &str, identity: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_replica"))
            .args(backend)
            .args(["--identity", identity, "--prefix", prefix])
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

    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }

    /// The shards it said it holds last.
    pub(crate) fn held(&self) -> BTreeSet<u32> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find_map(|l| match l {
                Line::Held { shards, .. } => Some(shards.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Every `held` line it printed, for a failure message.
    pub(crate) fn held_lines(&self) -> Vec<Line> {
        self.lines()
            .into_iter()
            .filter(|l| matches!(l, Line::Held { .. }))
            .collect()
    }

    /// Closes stdin (a graceful shutdown: the held shards drain) and waits up to 10 s.
    pub(crate) fn stop(&mut self) {
        drop(self.stdin.take());
        for _ in 0..100 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("replica {} did not shut down within 10 s", self.name);
    }

    pub(crate) fn lines(&self) -> Vec<Line> {
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
pub(crate) async fn wait_until(bound: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !ok() {
        assert!(start.elapsed() < bound, "{what} within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every replica holds `want` shards, and all `SHARDS` are held.
pub(crate) fn settled(replicas: &[&Replica], want: usize) -> bool {
    let sets: Vec<_> = replicas.iter().map(|r| r.held()).collect();
    let all: BTreeSet<u32> = sets.iter().flatten().copied().collect();
    all.len() == SHARDS as usize && sets.iter().all(|s| s.len() == want)
}

/// One reconcile: who ran it, on which shard and token, from when to when (`None`: no end
/// line, taken as lasting to the end of the run).
#[derive(Debug, Clone)]
pub(crate) struct Reconcile {
    pub(crate) replica: String,
    pub(crate) key: u32,
    pub(crate) shard: u32,
    pub(crate) token: u64,
    pub(crate) start: u128,
    pub(crate) end: Option<u128>,
}

pub(crate) fn reconciles(replica: &Replica) -> Vec<Reconcile> {
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
pub(crate) fn overlaps(all: &[Reconcile]) -> Vec<(Reconcile, Reconcile)> {
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

/// Panics when two replicas ran one key's reconciles at once, naming the first such pair.
pub(crate) fn assert_no_overlaps(all: &[Reconcile]) {
    let both = overlaps(all);
    assert!(
        both.is_empty(),
        "{} overlaps, the first: {:?}",
        both.len(),
        both.first()
    );
}
