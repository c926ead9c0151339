//! The Lease lock and the elector against a real kube-apiserver (with etcd), started by
//! `ctrlq-envtest` from the binaries `scripts/install-controlplane` builds: the API
//! server's own answers, resource versions, validation, field management and RBAC; elections
//! with kills, revoked rights, and the API server frozen (SIGSTOP), killed and restarted. The
//! tests that change the server itself start a control plane of their own; the others share one
//! and each works in a namespace of its own. Real time (the server's clock cannot be paused):
//! every wait is bounded. `tests/lease.rs` covers what a real server will not do on demand.

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace, grant_leases};
use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeaderRecord, LeaseLock, Lock, LockError};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

const NAME: &str = "demo";

fn at(secs: u64, micros: u32) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(secs, micros * 1000)
}

fn record(holder: &str, transitions: u32) -> LeaderRecord {
    LeaderRecord {
        holder_identity: holder.into(),
        lease_duration_seconds: 15,
        acquire_time: at(1_700_000_000, 1),
        renew_time: at(1_700_000_005, 123_456),
        leader_transitions: transitions,
    }
}

/// The control plane, and a fresh namespace `ns` created by the admin.
async fn setup(ns: &str) -> (&'static ControlPlane, kube::Client) {
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, ns).await;
    (plane, admin)
}

/// The API status (code, reason) behind a backend failure.
fn api_status(err: &LockError) -> Option<(u16, String)> {
    match err.source()?.downcast_ref::<kube::Error>()? {
        kube::Error::Api(status) => Some((status.code, status.reason.clone())),
        _ => None,
    }
}

async fn stored(admin: &kube::Client, ns: &str, name: &str) -> Lease {
    kube::Api::<Lease>::namespaced(admin.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Lease {ns}/{name}: {e}"))
}

fn managers(lease: &Lease) -> Vec<String> {
    lease
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.clone())
        .collect()
}

#[tokio::test]
async fn lock_should_create_get_and_replace_with_the_resource_version() {
    let ns = "lock-crud";
    let (plane, admin) = setup(ns).await;
    let a = LeaseLock::new(plane.client(ADMIN), ns, NAME, "a");
    let b = LeaseLock::new(plane.client(ADMIN), ns, NAME, "b").field_manager("my-controller");
    assert!(matches!(a.get().await, Err(LockError::NotFound)));
    // update before any read: a conflict, and nothing is sent.
    assert!(matches!(
        a.update(record("a", 0)).await,
        Err(LockError::Conflict)
    ));

    let v1 = a.create(record("a", 0)).await.unwrap();
    let lease = stored(&admin, ns, NAME).await;
    assert_eq!(
        lease.metadata.resource_version.as_deref(),
        Some(v1.as_str())
    );
    assert_eq!(managers(&lease), ["ctrlq-leader"]);
    // The record survives the server: microseconds, transitions, duration.
    let got = a.get().await.unwrap();
    assert_eq!(
        (got.version.as_str(), &got.record),
        (v1.as_str(), &record("a", 0))
    );
    assert!(matches!(
        b.create(record("b", 0)).await,
        Err(LockError::AlreadyExists)
    ));

    // b reads, a writes: b's resourceVersion is stale and the server refuses it.
    assert_eq!(b.get().await.unwrap().version, v1);
    let v2 = a.update(record("a", 1)).await.unwrap();
    assert_ne!(v1, v2);
    assert!(matches!(
        b.update(record("b", 2)).await,
        Err(LockError::Conflict)
    ));
    // Read again, b's write goes through, under its own field manager.
    assert_eq!(b.get().await.unwrap().version, v2);
    let v3 = b.update(record("b", 2)).await.unwrap();
    let lease = stored(&admin, ns, NAME).await;
    assert_eq!(
        lease.metadata.resource_version.as_deref(),
        Some(v3.as_str())
    );
    assert_eq!(managers(&lease), ["ctrlq-leader", "my-controller"]);
    assert_eq!(a.get().await.unwrap().record, record("b", 2));

    // A deleted Lease. Leases allow create on update, but a replace carrying the deleted
    // object's uid (as the lock's does: it sends the Lease it last read) fails the uid
    // precondition: 409, so the lock's update is a conflict, and read again the Lease is missing.
    let api = kube::Api::<Lease>::namespaced(admin.clone(), ns);
    let deleted = stored(&admin, ns, NAME).await;
    api.delete(NAME, &Default::default()).await.unwrap();
    match api.replace(NAME, &Default::default(), &deleted).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
            assert!(
                status
                    .message
                    .contains("Precondition failed: UID in precondition"),
                "{status:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.update(record("b", 3)).await,
        Err(LockError::Conflict)
    ));
    assert!(matches!(b.get().await, Err(LockError::NotFound)));
    b.create(record("b", 3)).await.unwrap();
    assert_eq!(a.get().await.unwrap().record, record("b", 3));
    // Without a uid, the same replace creates the Lease again, whatever its resourceVersion.
    let current = stored(&admin, ns, NAME).await;
    api.delete(NAME, &Default::default()).await.unwrap();
    let mut no_uid = current.clone();
    no_uid.metadata.uid = None;
    let created = api
        .replace(NAME, &Default::default(), &no_uid)
        .await
        .unwrap();
    assert_ne!(created.metadata.uid, current.metadata.uid);
    assert_eq!(a.get().await.unwrap().record, record("b", 3));
    assert_eq!(a.describe(), format!("{ns}/{NAME}"));
}

/// What kube-apiserver's validation refuses comes back as a backend error carrying its status,
/// and what it does not validate is stored as written.
#[tokio::test]
async fn lock_should_report_what_the_api_server_refuses() {
    let ns = "lock-invalid";
    let (plane, admin) = setup(ns).await;
    let lock = |name: &str| LeaseLock::new(plane.client(ADMIN), ns, name, "a");

    let mut zero = record("a", 0);
    zero.lease_duration_seconds = 0;
    let err = lock("zero").create(zero).await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert_eq!(api_status(&err), Some((422, "Invalid".into())), "{err:?}");
    assert!(
        err.source()
            .unwrap()
            .to_string()
            .contains("spec.leaseDurationSeconds"),
        "{err:?}"
    );

    // A name that is no DNS subdomain.
    let err = lock("Not_A_Name").create(record("a", 0)).await.unwrap_err();
    assert_eq!(api_status(&err), Some((422, "Invalid".into())), "{err:?}");
    // A label value over 63 characters.
    let err = lock("labelled")
        .label("ctrlq.io/controller", "x".repeat(64))
        .create(record("a", 0))
        .await
        .unwrap_err();
    assert_eq!(api_status(&err), Some((422, "Invalid".into())), "{err:?}");
    // A field manager over 128 characters: kube-rs refuses to build the request (the API
    // server's limit), and the lock reports it as a backend error too.
    let err = lock("managed")
        .field_manager("m".repeat(129))
        .create(record("a", 0))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.source().unwrap().downcast_ref::<kube::Error>(),
            Some(kube::Error::BuildRequest(_))
        ),
        "{err:?}"
    );
    lock("managed")
        .field_manager("m".repeat(128))
        .create(record("a", 0))
        .await
        .unwrap();
    for name in ["zero", "labelled"] {
        assert!(matches!(lock(name).get().await, Err(LockError::NotFound)));
    }

    // Not validated: a holder identity of any length, a duration up to i32::MAX (the record's
    // u32 above it is written as i32::MAX).
    let mut long = record(&"h".repeat(300), 0);
    long.lease_duration_seconds = u32::MAX;
    lock("long").create(long.clone()).await.unwrap();
    let got = lock("long").get().await.unwrap().record;
    assert_eq!(got.holder_identity, long.holder_identity);
    assert_eq!(got.lease_duration_seconds, i32::MAX as u32);
    let spec = stored(&admin, ns, "long").await.spec.unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(i32::MAX));
}

fn config() -> LeaderElectionConfig {
    // Generous for a loaded machine: each request may take up to 5 s (the default timeout).
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(1))
        .jitter_seed(1)
}

/// Waits (at most 60 s) until the elector's status satisfies `f`.
async fn wait_status<L: Lock>(
    elector: &LeaderElector<L>,
    what: &str,
    mut f: impl FnMut(&ctrlq_leader::ElectorStatus) -> bool,
) -> ctrlq_leader::ElectorStatus {
    let mut status = elector.subscribe_status();
    timeout(Duration::from_secs(60), async {
        loop {
            {
                let s = status.borrow_and_update();
                if f(&s) {
                    return s.clone();
                }
            }
            status.changed().await.expect("the elector lives");
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{what} within 60 s: {:?}",
            elector.subscribe_status().borrow()
        )
    })
}

/// Waits (at most 60 s) until `n` lock operations of the elector have failed (each attempt
/// that fails starts with a read that succeeds, so failures in a row stay at one), then returns
/// its status.
async fn wait_errors<L: Lock>(elector: &LeaderElector<L>, n: u64) -> ctrlq_leader::ElectorStatus {
    timeout(Duration::from_secs(60), async {
        while elector.subscribe_status().borrow().lock_errors < n {
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{n} lock errors within 60 s: {:?}",
            elector.subscribe_status().borrow()
        )
    });
    elector.subscribe_status().borrow().clone()
}

/// Runs `elector` until `cancel`, noting whether it ever led.
fn run(
    elector: &Arc<LeaderElector<LeaseLock>>,
    cancel: &CancellationToken,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Option<()>>) {
    let led = Arc::new(AtomicBool::new(false));
    let (e, c, l) = (elector.clone(), cancel.clone(), led.clone());
    let task = tokio::spawn(async move {
        e.run(c, |leadership| async move {
            l.store(true, Ordering::SeqCst);
            leadership.token().cancelled().await;
        })
        .await
    });
    (led, task)
}

/// Runs an elector on `lock` until it has failed twice, checks that the last failure carries
/// the API status `status` and that it never led, then stops it.
async fn never_leads_and_reports(lock: LeaseLock, status: (u16, &str)) {
    let elector = Arc::new(LeaderElector::new(lock, config()).unwrap());
    let cancel = CancellationToken::new();
    let (led, task) = run(&elector, &cancel);
    let seen = wait_errors(&elector, 2).await;
    assert!(seen.consecutive_failures >= 1, "{seen:?}");
    let err = seen.last_error.expect("the error is reported");
    assert_eq!(
        api_status(&err),
        Some((status.0, status.1.into())),
        "{err:?}"
    );
    assert!(!seen.leading && !elector.is_leader());
    cancel.cancel();
    let ended = timeout(Duration::from_secs(30), task).await.unwrap();
    assert_eq!(ended.unwrap(), None);
    assert!(!led.load(Ordering::SeqCst));
}

/// A Lease the API server refuses to create (an invalid name): the elector reports the 422 and
/// never leads.
#[tokio::test]
async fn an_elector_should_never_lead_on_a_lease_the_api_server_refuses() {
    let ns = "elector-invalid";
    let (plane, _admin) = setup(ns).await;
    let lock = LeaseLock::new(plane.client(ADMIN), ns, "Not_A_Name", "a");
    never_leads_and_reports(lock, (422, "Invalid")).await;
}

/// A Lease in a namespace that does not exist: the API server answers the get and the create
/// with 404. The create's 404 is a backend failure carrying the API's status (it names the
/// namespace), so the elector reports it in its status and never leads.
#[tokio::test]
async fn an_elector_should_report_a_lease_namespace_that_does_not_exist() {
    let ns = "no-such-namespace";
    let plane = ControlPlane::shared().await;
    let lock = LeaseLock::new(plane.client(ADMIN), ns, NAME, "a");
    let err = lock.create(record("a", 0)).await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert_eq!(api_status(&err), Some((404, "NotFound".into())), "{err:?}");
    assert!(err.source().unwrap().to_string().contains(ns), "{err:?}");
    assert!(matches!(lock.get().await, Err(LockError::NotFound)));
    let lock = LeaseLock::new(plane.client(ADMIN), ns, NAME, "a");
    never_leads_and_reports(lock, (404, "NotFound")).await;
}

/// `list` reads the namespace's Leases carrying the lock's labels, narrowed to a name prefix,
/// in name order.
#[tokio::test]
async fn list_should_select_by_label_and_name_prefix() {
    let ns = "lock-list";
    let (plane, admin) = setup(ns).await;
    create_namespace(&admin, "lock-list-other").await;
    let client = plane.client(ADMIN);
    let labelled = |ns: &str, name: &str, controller: &str| {
        LeaseLock::new(client.clone(), ns, name, "a").label("ctrlq.io/controller", controller)
    };
    labelled(ns, "pods-member-b", "pods")
        .create(record("b", 0))
        .await
        .unwrap();
    labelled(ns, "pods-member-a", "pods")
        .create(record("a", 3))
        .await
        .unwrap();
    labelled(ns, "pods-shard-0", "pods")
        .create(record("a", 1))
        .await
        .unwrap();
    labelled(ns, "jobs-member-a", "jobs")
        .create(record("a", 0))
        .await
        .unwrap();
    LeaseLock::new(client.clone(), ns, "pods-member-z", "z")
        .create(record("z", 0))
        .await
        .unwrap();
    labelled("lock-list-other", "pods-member-c", "pods")
        .create(record("c", 0))
        .await
        .unwrap();
    let lease = stored(&admin, ns, "pods-member-a").await;
    let labels = lease.metadata.labels.unwrap();
    assert_eq!(
        labels.get("ctrlq.io/controller").map(String::as_str),
        Some("pods")
    );

    let listed = labelled(ns, "pods-member-a", "pods")
        .list("pods-member-")
        .await
        .unwrap();
    let seen: Vec<_> = listed
        .iter()
        .map(|(name, v)| (name.as_str(), v.record.holder_identity.as_str()))
        .collect();
    assert_eq!(seen, [("pods-member-a", "a"), ("pods-member-b", "b")]);
    assert_eq!(listed[0].1.record.leader_transitions, 3);
    // The listed version is the Lease's resourceVersion.
    assert_eq!(
        Some(listed[0].1.version.as_str()),
        stored(&admin, ns, "pods-member-a")
            .await
            .metadata
            .resource_version
            .as_deref()
    );
    // Without labels the prefix alone narrows the namespace's Leases.
    let all = LeaseLock::new(client.clone(), ns, NAME, "a")
        .list("pods-member-")
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
}

/// An identity allowed only get, list, create and update on Leases in one namespace: the elector
/// creates the Lease, leads, renews it, and releases it on cancel.
#[tokio::test]
async fn a_least_privilege_identity_should_lead_renew_and_release() {
    let ns = "rbac-allowed";
    let (plane, admin) = setup(ns).await;
    let user = "alice";
    grant_leases(&admin, ns, user, &["get", "list", "create", "update"]).await;
    let lock = LeaseLock::new(plane.client(user), ns, NAME, user);
    let elector = Arc::new(LeaderElector::new(lock, config().release_on_cancel(true)).unwrap());
    let cancel = CancellationToken::new();
    let (led, task) = run(&elector, &cancel);
    let status = wait_status(&elector, "leading", |s| s.leading).await;
    assert_eq!(status.leader, user);
    let first = stored(&admin, ns, NAME).await.spec.unwrap();
    assert_eq!(first.holder_identity.as_deref(), Some(user));
    let transitions = first.lease_transitions.expect("leaseTransitions");
    assert_eq!(status.fencing_token, Some(transitions as u64));
    // It renews: the stored renewTime moves on (one retry period between renews).
    timeout(Duration::from_secs(60), async {
        while stored(&admin, ns, NAME).await.spec.unwrap().renew_time == first.renew_time {
            sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a renew within 60 s");
    assert!(elector.is_leader());
    // Listing needs only `list`.
    let lister = LeaseLock::new(plane.client(user), ns, NAME, user);
    assert_eq!(lister.list("").await.unwrap().len(), 1);

    cancel.cancel();
    timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert!(led.load(Ordering::SeqCst));
    let released = lister.get().await.unwrap().record;
    assert!(released.is_free(), "{released:?}");
    assert_eq!(released.leader_transitions, transitions as u32);
}

/// Without `update` (get, list and create only), a candidate finding a free Lease cannot take
/// it: the 403 is reported in its status and it never leads. Without any grant even `get` is
/// refused.
#[tokio::test]
async fn an_identity_without_update_should_never_lead() {
    let ns = "rbac-no-update";
    let (plane, admin) = setup(ns).await;
    let user = "bob";
    grant_leases(&admin, ns, user, &["get", "list", "create"]).await;
    // A released Lease (as the elector's release leaves it), written by the admin.
    let mut free = record("", 4);
    free.lease_duration_seconds = 1;
    LeaseLock::new(plane.client(ADMIN), ns, NAME, ADMIN)
        .create(free)
        .await
        .unwrap();

    let lock = LeaseLock::new(plane.client(user), ns, NAME, user);
    let elector = Arc::new(LeaderElector::new(lock, config()).unwrap());
    let cancel = CancellationToken::new();
    let (led, task) = run(&elector, &cancel);
    let status = wait_errors(&elector, 2).await;
    let err = status.last_error.expect("the error is reported");
    assert!(matches!(*err, LockError::Backend(_)), "{err:?}");
    assert_eq!(api_status(&err), Some((403, "Forbidden".into())), "{err:?}");
    assert!(!status.leading && !elector.is_leader());
    cancel.cancel();
    assert_eq!(
        timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap(),
        None
    );
    assert!(!led.load(Ordering::SeqCst));
    let lease = stored(&admin, ns, NAME).await.spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some(""));
    assert_eq!(lease.lease_transitions, Some(4));

    // No grant at all: the read is refused.
    let nobody = LeaseLock::new(plane.client("carol"), ns, NAME, "carol");
    let err = nobody.get().await.unwrap_err();
    assert_eq!(api_status(&err), Some((403, "Forbidden".into())), "{err:?}");
}

/// An update rewrites only the record's fields: what else the Lease carries (labels,
/// annotations, and whatever of `spec.strategy` and `spec.preferredHolder` the server kept) stays.
#[tokio::test]
async fn update_should_keep_the_fields_the_lock_does_not_own() {
    let ns = "lock-keep";
    let (plane, admin) = setup(ns).await;
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": NAME,
            "labels": {"app": "my-controller"},
            "annotations": {"example.com/note": "kept"},
        },
        "spec": {
            "holderIdentity": "go-controller",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000001Z",
            "renewTime": "2026-01-01T00:00:05.000001Z",
            "leaseTransitions": 4,
            "strategy": "OldestEmulationVersion",
            "preferredHolder": "go-controller-2",
        },
    }))
    .unwrap();
    let api = kube::Api::<Lease>::namespaced(admin.clone(), ns);
    let before = api.create(&Default::default(), &lease).await.unwrap();

    let lock = LeaseLock::new(plane.client(ADMIN), ns, NAME, "a");
    let got = lock.get().await.unwrap();
    assert_eq!(got.record.holder_identity, "go-controller");
    assert_eq!(got.record.leader_transitions, 4);
    assert_eq!(got.record.renew_time, at(1_767_225_605, 1));
    lock.update(record("a", 5)).await.unwrap();

    let after = stored(&admin, ns, NAME).await;
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    assert_eq!(after.metadata.uid, before.metadata.uid);
    let (spec, old) = (after.spec.unwrap(), before.spec.unwrap());
    assert_eq!(
        (spec.strategy, spec.preferred_holder),
        (old.strategy, old.preferred_holder)
    );
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(5));
}

/// Two electors on one Lease: one leads, the other follows it; on cancel the leader releases
/// the Lease and the other takes it at its next retry (not after the lease duration), with a
/// larger fencing token.
#[tokio::test]
async fn a_released_lease_should_pass_to_the_waiting_candidate() {
    let ns = "elector-handover";
    let (plane, _admin) = setup(ns).await;
    let elector = |id: &str| {
        let lock = LeaseLock::new(plane.client(ADMIN), ns, NAME, id);
        Arc::new(LeaderElector::new(lock, config().release_on_cancel(true)).unwrap())
    };
    let (a, b) = (elector("a"), elector("b"));
    let (cancel_a, cancel_b) = (CancellationToken::new(), CancellationToken::new());
    let (a_led, a_task) = run(&a, &cancel_a);
    let a_status = wait_status(&a, "a leading", |s| s.leading).await;
    let (b_led, b_task) = run(&b, &cancel_b);
    wait_status(&b, "b following a", |s| s.leader == "a").await;
    assert!(!b.is_leader());

    cancel_a.cancel();
    timeout(Duration::from_secs(30), a_task)
        .await
        .unwrap()
        .unwrap();
    assert!(a_led.load(Ordering::SeqCst));
    let b_status = wait_status(&b, "b leading", |s| s.leading).await;
    assert!(b_led.load(Ordering::SeqCst));
    assert!(
        b_status.fencing_token > a_status.fencing_token,
        "{a_status:?} {b_status:?}"
    );
    cancel_b.cancel();
    timeout(Duration::from_secs(30), b_task)
        .await
        .unwrap()
        .unwrap();
}

/// Short settings, so a fault test ends in seconds: LD 4 s, RD 3 s, RP 0.5 s, each request
/// bounded by 1 s.
fn short(plane: &ControlPlane, ns: &str, id: &str) -> Arc<LeaderElector<LeaseLock>> {
    let lock =
        LeaseLock::new(plane.client(ADMIN), ns, NAME, id).request_timeout(Duration::from_secs(1));
    let config = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500))
        .jitter_seed(7);
    Arc::new(LeaderElector::new(lock, config).unwrap())
}

/// When each term of one elector began and ended (real time), and its fencing token.
type Terms = Arc<std::sync::Mutex<Vec<(std::time::Instant, Option<std::time::Instant>, u64)>>>;

/// A running candidate: its elector, its terms, its task.
type Running = (
    Arc<LeaderElector<LeaseLock>>,
    Terms,
    tokio::task::JoinHandle<()>,
);

/// Notes the end of a term when dropped: when its leadership ends, and when its task is aborted
/// (a killed process).
struct TermEnd(Terms, usize);

impl Drop for TermEnd {
    fn drop(&mut self) {
        let mut terms = self.0.lock().unwrap_or_else(|e| e.into_inner());
        terms[self.1].1.get_or_insert_with(std::time::Instant::now);
    }
}

/// Runs `elector` until `cancel`, logging its terms.
fn logged(
    elector: &Arc<LeaderElector<LeaseLock>>,
    cancel: &CancellationToken,
) -> (Terms, tokio::task::JoinHandle<()>) {
    let terms = Terms::default();
    let (e, c, t) = (elector.clone(), cancel.clone(), terms.clone());
    let task = tokio::spawn(async move {
        e.run_until_cancelled(c, move |leadership| {
            let t = t.clone();
            async move {
                let i = {
                    let mut terms = t.lock().unwrap();
                    let now = std::time::Instant::now();
                    terms.push((now, None, leadership.fencing_token()));
                    terms.len() - 1
                };
                let _end = TermEnd(t, i);
                leadership.token().cancelled().await;
            }
        })
        .await;
    });
    (terms, task)
}

/// Waits (at most 60 s) until `terms` holds `n` terms; returns the last one's start.
async fn term_started(terms: &Terms, n: usize) -> std::time::Instant {
    timeout(Duration::from_secs(60), async {
        loop {
            if let Some(t) = terms.lock().unwrap().get(n - 1) {
                return t.0;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("term {n} within 60 s: {:?}", terms.lock().unwrap()))
}

/// Waits (at most 60 s) until term `n` (1-based) of `terms` has ended; returns when.
async fn term_ended(terms: &Terms, n: usize) -> std::time::Instant {
    timeout(Duration::from_secs(60), async {
        loop {
            if let Some(end) = terms.lock().unwrap().get(n - 1).and_then(|t| t.1) {
                return end;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("term {n} ended within 60 s: {:?}", terms.lock().unwrap()))
}

/// Cancels the candidates and waits (at most 30 s each) for their tasks to end.
async fn stop(
    cancel: &CancellationToken,
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<()>>,
) {
    cancel.cancel();
    for task in tasks {
        timeout(Duration::from_secs(30), task)
            .await
            .expect("the candidate stops within 30 s")
            .expect("the candidate's task ends without a panic");
    }
}

/// No two terms of `a` and `b` overlap in time, and the fencing tokens, in start order, rise by
/// one a term.
fn check_no_overlap(a: &Terms, b: &Terms) {
    check_terms(&[a.clone(), b.clone()]);
}

/// No two terms of any candidates overlap in time, and the fencing tokens, in start order,
/// rise by one a term; returns how many terms there were.
fn check_terms(candidates: &[Terms]) -> usize {
    let mut all: Vec<_> = Vec::new();
    for terms in candidates {
        all.extend(terms.lock().unwrap().iter().cloned());
    }
    all.sort_by_key(|t| t.0);
    for pair in all.windows(2) {
        let end = pair[0].1.expect("only the last term may still run");
        assert!(end <= pair[1].0, "two leaders at once: {all:?}");
        assert_eq!(pair[1].2, pair[0].2 + 1, "tokens: {all:?}");
    }
    all.len()
}

/// A fault of the API server while `a` leads and `b` follows: `a` stops leading within retry
/// period + renew deadline of the fault (the elector's bound, counted from its last successful
/// renew, which was before the fault), and once the server is back one of them leads again;
/// never two leaders at once.
async fn leader_under_fault(ns: &str, kill: bool) {
    // A control plane of its own: the fault would disturb other tests.
    let plane = ControlPlane::start().await;
    create_namespace(&plane.client(ADMIN), ns).await;
    let (a, b) = (short(&plane, ns, "a"), short(&plane, ns, "b"));
    let cancel = CancellationToken::new();
    let (a_terms, a_task) = logged(&a, &cancel);
    term_started(&a_terms, 1).await;
    let (b_terms, b_task) = logged(&b, &cancel);
    wait_status(&b, "b following a", |s| s.leader == "a").await;
    // A few renews in, so the fault meets a leader in its renew loop.
    sleep(Duration::from_secs(1)).await;

    let fault = std::time::Instant::now();
    if kill {
        plane.kill_apiserver();
    } else {
        plane.pause_apiserver();
    }
    let stopped = term_ended(&a_terms, 1).await;
    // The documented bound: retry period + renew deadline after the last successful renew was
    // sent, which was before the fault; the slack is for a loaded machine.
    let bound = Duration::from_millis(500) + Duration::from_secs(3);
    assert!(
        stopped - fault <= bound + Duration::from_millis(250),
        "a stopped leading {:?} after the fault, past retry period + renew deadline",
        stopped - fault
    );
    assert!(
        b_terms.lock().unwrap().is_empty(),
        "b led while the server was down"
    );
    sleep(Duration::from_secs(1)).await;
    if kill {
        plane.start_apiserver().await;
    } else {
        plane.resume_apiserver();
    }
    // Someone leads again.
    timeout(Duration::from_secs(60), async {
        while a_terms.lock().unwrap().len() + b_terms.lock().unwrap().len() < 2 {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a leader within 60 s of the server's return");
    stop(&cancel, [a_task, b_task]).await;
    check_no_overlap(&a_terms, &b_terms);
}

/// kube-apiserver stopped (SIGSTOP) while the leader renews: every request hangs until its
/// timeout.
#[tokio::test]
async fn a_leader_should_step_down_in_time_when_the_apiserver_freezes() {
    leader_under_fault("fault-freeze", false).await;
}

/// kube-apiserver killed while the leader renews, started again later: every request is
/// refused at once.
#[tokio::test]
async fn a_leader_should_step_down_in_time_when_the_apiserver_dies() {
    leader_under_fault("fault-kill", true).await;
}

/// Three electors; the leader is killed (its task aborted, as a killed process: no release)
/// three times, each time replaced by a new candidate. Each next leader starts after the killed
/// one's lease expired on its own clock and within lease duration + 4.4 × retry period of the
/// kill (plus slack for a loaded machine); never two leaders at once; tokens rise by one.
#[tokio::test]
async fn three_lease_electors_should_fail_over_when_the_leader_is_killed() {
    let ns = "elector-kills";
    let (plane, _admin) = setup(ns).await;
    let cancel = CancellationToken::new();
    let mut candidates: Vec<Running> = Vec::new();
    for id in ["a", "b", "c"] {
        let e = short(plane, ns, id);
        let (terms, task) = logged(&e, &cancel);
        candidates.push((e, terms, task));
    }
    let all = |c: &[Running]| c.iter().map(|c| c.1.clone()).collect::<Vec<_>>();
    let leading = |c: &[Running]| {
        c.iter()
            .position(|c| c.1.lock().unwrap().last().is_some_and(|t| t.1.is_none()))
    };
    for kill in 1..=3 {
        let leader = timeout(Duration::from_secs(60), async {
            loop {
                if let Some(i) = leading(&candidates) {
                    return i;
                }
                sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("a leader within 60 s");
        // A few renews in.
        sleep(Duration::from_secs(1)).await;
        let killed_at = std::time::Instant::now();
        candidates[leader].2.abort();
        let terms_before = check_terms(&all(&candidates));
        let next = timeout(Duration::from_secs(60), async {
            loop {
                let starts: Vec<_> = candidates
                    .iter()
                    .filter_map(|c| c.1.lock().unwrap().last().copied())
                    .filter(|t| t.0 > killed_at)
                    .collect();
                if let Some(t) = starts.first() {
                    return t.0;
                }
                sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("kill {kill}: a next leader within 60 s"));
        let failover = next - killed_at;
        // The lease was renewed at most a retry period (plus a request) before the kill.
        assert!(
            failover >= Duration::from_secs(4) - Duration::from_millis(1500),
            "kill {kill}: the next leader {failover:?} after the kill, before the lease expired"
        );
        assert!(
            failover <= Duration::from_secs(4) + Duration::from_millis(2200 + 1000),
            "kill {kill}: the next leader only {failover:?} after the kill"
        );
        assert_eq!(check_terms(&all(&candidates)), terms_before + 1);
        // The killed process comes back as a new pod.
        let e = short(plane, ns, &format!("new-{kill}"));
        let (terms, task) = logged(&e, &cancel);
        candidates[leader] = (e, terms, task);
    }
    cancel.cancel();
    let terms = all(&candidates);
    for (_, _, task) in candidates {
        let _ = timeout(Duration::from_secs(30), task).await.unwrap();
    }
    check_terms(&terms);
}

/// The leader's identity loses its rights on Leases (its RoleBinding deleted: every request it
/// makes is refused with 403, a partition of that one client): it stops leading, reports the
/// 403, and the other candidate takes over once the lease expired, with the next token; never
/// two leaders at once.
#[tokio::test]
async fn a_leader_whose_rights_are_revoked_should_step_down_before_another_leads() {
    let ns = "elector-revoked";
    let (plane, admin) = setup(ns).await;
    let verbs = ["get", "list", "create", "update"];
    grant_leases(&admin, ns, "carol", &verbs).await;
    grant_leases(&admin, ns, "dave", &verbs).await;
    let elector = |user: &str| {
        let lock = LeaseLock::new(plane.client(user), ns, NAME, user)
            .request_timeout(Duration::from_secs(1));
        let config = LeaderElectionConfig::default()
            .lease_duration(Duration::from_secs(4))
            .renew_deadline(Duration::from_secs(3))
            .retry_period(Duration::from_millis(500))
            .jitter_seed(3);
        Arc::new(LeaderElector::new(lock, config).unwrap())
    };
    let (carol, dave) = (elector("carol"), elector("dave"));
    let cancel = CancellationToken::new();
    let (carol_terms, carol_task) = logged(&carol, &cancel);
    term_started(&carol_terms, 1).await;
    let (dave_terms, dave_task) = logged(&dave, &cancel);
    wait_status(&dave, "dave following carol", |s| s.leader == "carol").await;

    kube::Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), ns)
        .delete("leases-carol", &Default::default())
        .await
        .unwrap();
    term_ended(&carol_terms, 1).await;
    term_started(&dave_terms, 1).await;
    let status = carol.subscribe_status().borrow().clone();
    let err = status.last_error.expect("carol's refusal is reported");
    assert_eq!(api_status(&err).map(|s| s.0), Some(403), "{err:?}");
    assert!(carol_terms.lock().unwrap().len() == 1 && !carol.is_leader());
    stop(&cancel, [carol_task, dave_task]).await;
    check_no_overlap(&carol_terms, &dave_terms);
}

/// xorshift64*: a seeded schedule of faults.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Three electors on a kube-apiserver that a seeded schedule freezes (SIGSTOP for 0.2 to 2.5 s,
/// so requests are slow or time out), kills and starts again, while the leader is killed now
/// and then (replaced by a new candidate): never two leaders at once, tokens rising by one a
/// term, and a leader again after the last fault.
#[tokio::test]
async fn lease_electors_should_keep_one_leader_under_a_freezing_and_dying_apiserver() {
    let ns = "elector-chaos";
    // A control plane of its own: the faults would disturb other tests.
    let plane = ControlPlane::start().await;
    create_namespace(&plane.client(ADMIN), ns).await;
    let cancel = CancellationToken::new();
    let mut candidates = Vec::new();
    let mut past: Vec<Terms> = Vec::new();
    for id in ["a", "b", "c"] {
        let e = short(&plane, ns, id);
        candidates.push(logged(&e, &cancel));
    }
    let mut rng = Rng(0x5EED_CAFE);
    for step in 0..12 {
        sleep(Duration::from_millis(300 + rng.below(1500))).await;
        match rng.below(4) {
            0 | 1 => {
                plane.pause_apiserver();
                sleep(Duration::from_millis(200 + rng.below(2300))).await;
                plane.resume_apiserver();
            }
            2 => plane.restart_apiserver().await,
            _ => {
                let leader = candidates
                    .iter()
                    .position(|c| c.0.lock().unwrap().last().is_some_and(|t| t.1.is_none()));
                if let Some(i) = leader {
                    candidates[i].1.abort();
                    let e = short(&plane, ns, &format!("new-{step}"));
                    let replaced = std::mem::replace(&mut candidates[i], logged(&e, &cancel));
                    past.push(replaced.0);
                }
            }
        }
    }
    // A leader again after the last fault.
    timeout(Duration::from_secs(60), async {
        loop {
            if candidates
                .iter()
                .any(|c| c.0.lock().unwrap().last().is_some_and(|t| t.1.is_none()))
            {
                return;
            }
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a leader within 60 s of the last fault");
    cancel.cancel();
    for (terms, task) in candidates {
        let _ = timeout(Duration::from_secs(30), task).await.unwrap();
        past.push(terms);
    }
    let terms = check_terms(&past);
    assert!(terms >= 3, "only {terms} terms");
}
