//! Replicas of a sharded controller as processes (`shard_replica`, each on `Watch::for_shards`
//! with Leases) on a real kube-apiserver with `ShardedListAndWatch` on: two settle; one is
//! killed (SIGKILL) while every object changes and a third joins; one is frozen (SIGSTOP) past
//! its leases while every object changes, and resumed; kube-apiserver is restarted without the
//! gate and every object changes again. No key is ever in two reconciles at once
//! across the processes, every object's last reconcile read its last version, no shard is
//! reported unowned for longer than the bound after a death, and once settled none is reported
//! unowned. Real time, every wait bounded.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use benches::replicas::{ReplicaProcess, create_config_maps};
use ctrlq_controller::shard::{field_hash, shard_of_hash};
use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const GATE: &str = "--feature-gates=ShardedListAndWatch=true";
const LEASES: &str = "proc-leases";
const SHARDS: u32 = 4;
const NAMESPACES: usize = 6;
const OBJECTS: usize = 30;
/// The bound after a death for `shard_replica`'s timing (the shard module docs): lease
/// duration + 4.2 retry periods + grace = 4 + 2.1 + 2 s.
const DEATH_BOUND: Duration = Duration::from_millis(8_100);

fn namespace(i: usize) -> String {
    format!("{}-proc", i % NAMESPACES)
}

/// One reconcile a process printed.
struct Reconciled {
    replica: &'static str,
    key: String,
    version: Option<String>,
    start_us: u64,
    end_us: u64,
}

/// The replica processes and what they printed.
#[derive(Default)]
struct Fleet {
    live: Vec<(&'static str, ReplicaProcess)>,
    /// The live replicas stopped with SIGSTOP.
    frozen: BTreeSet<&'static str>,
    /// Each freeze: the replica, and the wall-clock microseconds of its SIGSTOP and SIGCONT.
    freezes: Vec<(&'static str, u64, u64)>,
    reconciled: Vec<Reconciled>,
    held: HashMap<&'static str, BTreeSet<u32>>,
    /// Each report of unowned shards: the replica, the shards, the longest unowned, when read.
    unowned: Vec<(&'static str, Vec<u32>, Duration, Instant)>,
}

impl Fleet {
    fn start(&mut self, plane: &ControlPlane, id: &'static str) {
        let kubeconfig = plane.kubeconfig_file().display().to_string();
        let shards = SHARDS.to_string();
        let process = ReplicaProcess::spawn_program(
            env!("CARGO_BIN_EXE_shard_replica"),
            [kubeconfig.as_str(), LEASES, id, &shards],
        );
        self.live.push((id, process));
    }

    /// Reads every line the processes have printed so far.
    fn read(&mut self) {
        for (id, process) in &self.live {
            while let Ok(line) = process.lines.try_recv() {
                if let Some(key) = line["reconciled"].as_str() {
                    self.reconciled.push(Reconciled {
                        replica: id,
                        key: key.to_owned(),
                        version: line["version"].as_str().map(str::to_owned),
                        start_us: line["start_us"].as_u64().unwrap(),
                        end_us: line["end_us"].as_u64().unwrap(),
                    });
                } else if let Some(held) = line["held"].as_array() {
                    let held = held.iter().map(|s| s.as_u64().unwrap() as u32).collect();
                    self.held.insert(id, held);
                } else if let Some(shards) = line["unowned"].as_array() {
                    let shards = shards.iter().map(|s| s.as_u64().unwrap() as u32).collect();
                    let longest = Duration::from_millis(line["longest_ms"].as_u64().unwrap());
                    self.unowned.push((id, shards, longest, Instant::now()));
                }
            }
        }
    }

    /// SIGKILL: no drain, no lease released.
    fn kill(&mut self, id: &str) {
        let at = self.live.iter().position(|(i, _)| *i == id).unwrap();
        let (_, mut process) = self.live.remove(at);
        process.child.kill().unwrap();
        process.child.wait().unwrap();
        self.held.remove(id);
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the process of `id`.
    fn signal(&mut self, id: &'static str, signal: &str) {
        let (_, process) = self.live.iter().find(|(i, _)| *i == id).unwrap();
        let pid = process.child.id().to_string();
        // The freeze as the process may have seen it: from after the SIGSTOP is sent, until
        // before the SIGCONT is.
        let before = unix_us();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
        let now = unix_us();
        if signal == "-STOP" {
            self.frozen.insert(id);
            self.freezes.push((id, now, u64::MAX));
        } else {
            self.frozen.remove(id);
            let freeze = self.freezes.iter_mut().rev().find(|(i, ..)| *i == id);
            freeze.unwrap().2 = before;
        }
    }

    /// Whether the live replicas hold every shard between them, each some, and every object's
    /// last reconcile read its version on the server.
    fn settled(&self, server: &HashMap<String, String>) -> bool {
        let running: Vec<&str> = self
            .live
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !self.frozen.contains(id))
            .collect();
        let held: Vec<&BTreeSet<u32>> = running.iter().filter_map(|id| self.held.get(id)).collect();
        let all: BTreeSet<u32> = held.iter().copied().flatten().copied().collect();
        let count: usize = held.iter().map(|h| h.len()).sum();
        let mut last: HashMap<&str, &Option<String>> = HashMap::new();
        for r in &self.reconciled {
            last.insert(&r.key, &r.version);
        }
        held.len() == running.len()
            && held.iter().all(|h| !h.is_empty())
            && all.len() == SHARDS as usize
            && count == all.len()
            && server.iter().all(|(k, v)| {
                last.get(k.as_str())
                    .is_some_and(|l| l.as_deref() == Some(v))
            })
    }
}

fn unix_us() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// The test's ConfigMaps on the server: `namespace/name` → resource version.
async fn on_server(admin: &kube::Client) -> HashMap<String, String> {
    let all = Api::<ConfigMap>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    all.iter()
        .filter(|cm| cm.namespace().is_some_and(|ns| ns.ends_with("-proc")))
        .map(|cm| {
            let key = format!("{}/{}", cm.namespace().unwrap(), cm.name_any());
            (key, cm.resource_version().unwrap())
        })
        .collect()
}

async fn change_all(admin: &kube::Client, round: u32) {
    for i in 0..OBJECTS {
        let patch = json!({"data": {"round": round.to_string()}});
        Api::<ConfigMap>::namespaced(admin.clone(), &namespace(i))
            .patch(
                &format!("cm-{i:06}"),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .unwrap();
    }
}

async fn settle(fleet: &mut Fleet, admin: &kube::Client, what: &str) {
    let start = Instant::now();
    loop {
        let server = on_server(admin).await;
        fleet.read();
        if fleet.settled(&server) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{what}: not settled in 90 s; held {:?}",
            fleet.held
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn replica_processes_killed_frozen_joined_and_restarted_keep_every_key_single_and_reconciled()
{
    let plane = ControlPlane::start_with([GATE]).await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, LEASES).await;
    create_config_maps(&admin, (0..NAMESPACES).map(namespace), OBJECTS, namespace).await;
    let spread: BTreeSet<u32> = (0..NAMESPACES)
        .map(|i| shard_of_hash(field_hash(&namespace(i)), SHARDS))
        .collect();
    assert!(spread.len() >= 2, "the namespaces span shards: {spread:?}");

    let mut fleet = Fleet::default();
    fleet.start(&plane, "a");
    fleet.start(&plane, "b");
    settle(&mut fleet, &admin, "two replicas").await;

    // a killed while everything changes, and c joins.
    let killed = Instant::now();
    fleet.kill("a");
    change_all(&admin, 1).await;
    fleet.start(&plane, "c");
    settle(&mut fleet, &admin, "after the kill and the join").await;

    // b frozen (SIGSTOP) past its leases while everything changes: c takes every shard. Resumed
    // (SIGCONT), b finds its leases gone before it reconciles again, and takes its share back.
    fleet.signal("b", "-STOP");
    change_all(&admin, 2).await;
    settle(&mut fleet, &admin, "with b frozen").await;
    fleet.signal("b", "-CONT");
    change_all(&admin, 3).await;
    settle(&mut fleet, &admin, "after b resumed").await;

    // kube-apiserver again, without the gate, and everything changes again.
    plane.kill_apiserver();
    plane.start_apiserver_with::<_, String>([]).await;
    change_all(&admin, 4).await;
    settle(&mut fleet, &admin, "after the restart without the gate").await;
    // A few looks after: what the survivors report before they leave (leaving, they release
    // their shards, which the other's last look may see unowned).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    fleet.read();
    let before_leaving = fleet.unowned.len();

    // The survivors drain and leave.
    for (_, process) in &mut fleet.live {
        drop(process.stdin.take());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, process) in &mut fleet.live {
        while process.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "{id} did not drain and exit");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    fleet.read();

    // No key in two reconciles at once, across the processes, but for a reconcile that was
    // running when its process was frozen: it started on a current lease, and no lease can
    // stop a process that does not run (the writes it makes on resuming carry its term's
    // fencing token, which the store refuses once a newer holder wrote). Every other overlap
    // fails, a reconcile started by the resumed process before it saw its leases gone among
    // them.
    let spanned_a_freeze = |r: &Reconciled| {
        fleet
            .freezes
            .iter()
            .any(|(id, stop, cont)| *id == r.replica && r.start_us < *stop && r.end_us > *cont)
    };
    let mut by_key: HashMap<&str, Vec<&Reconciled>> = HashMap::new();
    for r in &fleet.reconciled {
        by_key.entry(&r.key).or_default().push(r);
    }
    let mut frozen_in_flight = 0;
    for (key, mut spans) in by_key {
        spans.sort_by_key(|r| r.start_us);
        for pair in spans.windows(2) {
            if pair[1].start_us >= pair[0].end_us {
                continue;
            }
            assert!(
                spanned_a_freeze(pair[0]),
                "{key}: {} from {} while {} from {} until {} (freezes {:?})",
                pair[1].replica,
                pair[1].start_us,
                pair[0].replica,
                pair[0].start_us,
                pair[0].end_us,
                fleet.freezes
            );
            frozen_in_flight += 1;
        }
    }
    assert!(
        frozen_in_flight <= 2,
        "at most one reconcile per worker of b was frozen"
    );
    // a's shards reported unowned, none for longer than the bound, and every survivor's last
    // report before leaving empty.
    let after: Vec<_> = fleet
        .unowned
        .iter()
        .filter(|(.., at)| *at >= killed)
        .collect();
    assert!(
        after.iter().any(|(_, shards, ..)| !shards.is_empty()),
        "a's shards were reported unowned"
    );
    for (id, shards, longest, _) in &fleet.unowned {
        assert!(
            *longest <= DEATH_BOUND,
            "{id}: {shards:?} unowned for {longest:?}"
        );
    }
    for id in ["b", "c"] {
        let last = fleet.unowned[..before_leaving]
            .iter()
            .rev()
            .find(|(i, ..)| *i == id);
        assert!(
            last.is_none_or(|(_, shards, ..)| shards.is_empty()),
            "{id} last saw {last:?} unowned",
            last = last.map(|(_, s, ..)| s)
        );
    }
    let replicas: BTreeSet<&str> = fleet.reconciled.iter().map(|r| r.replica).collect();
    assert_eq!(replicas, ["a", "b", "c"].into(), "every replica reconciled");
}
