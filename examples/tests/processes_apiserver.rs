//! Replicas of a sharded controller as separate processes (the `replica` binary) on Kubernetes
//! Leases (labelled `ctrlq.io/controller=replica`) in a real kube-apiserver started by the test,
//! under a least-privilege identity (`get`, `list`, `create`, `update` on Leases in one
//! namespace): a replica killed, one joining, and kube-apiserver killed and started again in the
//! middle. No key is in two reconciles at once, every key is reconciled after the last
//! disturbance, and the shards end balanced. Real time: about 40 s.

#[path = "support/replicas.rs"]
mod replicas;

use std::time::Duration;

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace, grant_leases};
use replicas::{
    KEYS, Reconcile, Replica, assert_no_overlaps, now_ns, reconciles, settled, wait_until,
};

const NS: &str = "replicas";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_on_leases_follow_kills_joins_and_an_apiserver_restart() {
    let plane = ControlPlane::start().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, NS).await;
    grant_leases(&admin, NS, "alice", &["get", "list", "create", "update"]).await;
    let token = plane.token_file("alice").display().to_string();
    let ca = plane.ca_file().display().to_string();
    let backend = [
        "--kube",
        plane.url(),
        "--token-file",
        &token,
        "--ca-file",
        &ca,
        "--namespace",
        NS,
    ];
    let start = |name: &str| Replica::spawn(&backend, "sharded-", name, name);
    let (mut a, mut b, c) = (start("a"), start("b"), start("c"));
    wait_until(Duration::from_secs(30), "a, b, c at 2 shards each", || {
        settled(&[&a, &b, &c], 2)
    })
    .await;

    // A replica killed: the other two take its shards.
    c.signal("-KILL");
    wait_until(Duration::from_secs(20), "a, b at 3 shards each", || {
        settled(&[&a, &b], 3)
    })
    .await;
    // A replica joining: it gets its share.
    let mut d = start("d");
    wait_until(Duration::from_secs(20), "a, b, d at 2 shards each", || {
        settled(&[&a, &b, &d], 2)
    })
    .await;

    // kube-apiserver killed and started again: every renew fails meanwhile. A replica whose
    // renew deadline passes while the server is down loses its leases; one whose next renew
    // lands once the server is back keeps them. Either way the replicas settle again, and every
    // shard's Lease on the server is renewed after the restart by the replica that reports it.
    let down = std::time::SystemTime::now();
    plane.restart_apiserver().await;
    let start = std::time::Instant::now();
    loop {
        let reported = [&a, &b, &d].map(|r| (r.name.clone(), r.held()));
        if settled(&[&a, &b, &d], 2) && server_agrees(&admin, &reported, down).await {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a, b, d at 2 shards each, renewed on the server, within 30 s of the restart: \
             {:?}\nleases: {:?}",
            [&a, &b, &d].map(|r| (&r.name, r.held_lines())),
            leases(&admin).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled_at = now_ns();
    // Every key reconciled after the last disturbance.
    wait_until(
        Duration::from_secs(10),
        "every key reconciled again",
        || {
            let mut keys = std::collections::BTreeSet::new();
            for r in [&a, &b, &d] {
                keys.extend(
                    reconciles(r)
                        .into_iter()
                        .filter(|x| x.start > settled_at)
                        .map(|x| x.key),
                );
            }
            keys.len() == KEYS as usize
        },
    )
    .await;
    for r in [&mut a, &mut b, &mut d] {
        r.stop();
    }

    // No key in two reconciles at once. The killed replica's reconciles that never ended were
    // cut short by its death.
    let all: Vec<Reconcile> = [&a, &b, &d]
        .into_iter()
        .flat_map(reconciles)
        .chain(reconciles(&c).into_iter().filter(|r| r.end.is_some()))
        .collect();
    assert!(
        all.iter().any(|r| r.replica == "c"),
        "c reconciled before its death"
    );
    assert_no_overlaps(&all);
}

/// Every shard Lease on the server as `(name, holder, renew time)`.
async fn leases(admin: &kube::Client) -> Vec<(String, String, Option<std::time::SystemTime>)> {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: kube::Api<Lease> = kube::Api::namespaced(admin.clone(), NS);
    let Ok(list) = api.list(&kube::api::ListParams::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter_map(|lease| {
            let name = lease.metadata.name?;
            let spec = lease.spec.unwrap_or_default();
            let renewed = spec.renew_time.map(|t| std::time::SystemTime::from(t.0));
            Some((name, spec.holder_identity.unwrap_or_default(), renewed))
        })
        .collect()
}

/// Whether each shard a replica reports holding has its Lease held by that replica on the
/// server, renewed after `since`.
async fn server_agrees(
    admin: &kube::Client,
    reported: &[(String, std::collections::BTreeSet<u32>)],
    since: std::time::SystemTime,
) -> bool {
    let leases = leases(admin).await;
    reported.iter().all(|(name, shards)| {
        shards.iter().all(|shard| {
            let lease = format!("sharded-replica-shard-{shard}");
            leases.iter().any(|(n, holder, renewed)| {
                *n == lease && holder == name && renewed.is_some_and(|t| t > since)
            })
        })
    })
}
