//! The Lease lock and the elector against a real kube-apiserver (with etcd), started by
//! `support/control_plane.rs` from the binaries `scripts/install-controlplane` builds: the same
//! kinds of checks `tests/lease.rs` makes against the in-process emulation, here with the API
//! server's own answers, validation and RBAC. One control plane serves the whole binary; each test
//! works in a namespace of its own. Real time (the server's clock cannot be paused): every wait is
//! bounded.

#[path = "support/control_plane.rs"]
mod control_plane;

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use control_plane::{ADMIN, ControlPlane, create_namespace, grant_leases};
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

/// A Lease the API server refuses to create (an invalid name): the elector reports the 422 and
/// never leads.
#[tokio::test]
async fn an_elector_should_never_lead_on_a_lease_the_api_server_refuses() {
    let ns = "elector-invalid";
    let (plane, _admin) = setup(ns).await;
    let lock = LeaseLock::new(plane.client(ADMIN), ns, "Not_A_Name", "a");
    let elector = Arc::new(LeaderElector::new(lock, config()).unwrap());
    let cancel = CancellationToken::new();
    let (led, task) = run(&elector, &cancel);
    let status = wait_errors(&elector, 2).await;
    let err = status.last_error.expect("the error is reported");
    assert_eq!(api_status(&err), Some((422, "Invalid".into())), "{err:?}");
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

/// The starter's own promise: a control plane of a test's own is stopped and its directory
/// removed when dropped, also when the test panics.
#[tokio::test]
async fn a_control_plane_should_stop_and_clean_up_when_dropped() {
    let started = tokio::spawn(async {
        let plane = ControlPlane::start().await;
        let seen = (plane.dir().to_owned(), plane.url().to_owned());
        // The server answers before the panic.
        let admin = plane.client(ADMIN);
        let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
        assert_eq!(admin.request_text(request).await.unwrap(), "ok");
        std::panic::panic_any(seen);
    });
    let payload = started.await.unwrap_err().into_panic();
    let (dir, url) = *payload.downcast::<(std::path::PathBuf, String)>().unwrap();
    assert!(!dir.exists(), "{} left behind", dir.display());
    let port = url.rsplit_once(':').unwrap().1;
    assert!(
        tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
            .await
            .is_err(),
        "kube-apiserver still listens at {url}"
    );
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
                leadership.token().cancelled().await;
                t.lock().unwrap()[i].1 = Some(std::time::Instant::now());
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

/// No two terms of `a` and `b` overlap in time, and the fencing tokens, in start order, rise by
/// one a term.
fn check_no_overlap(a: &Terms, b: &Terms) {
    let mut all: Vec<_> = a.lock().unwrap().clone();
    all.extend(b.lock().unwrap().iter().cloned());
    all.sort_by_key(|t| t.0);
    for pair in all.windows(2) {
        let end = pair[0].1.expect("only the last term may still run");
        assert!(end <= pair[1].0, "two leaders at once: {all:?}");
        assert_eq!(pair[1].2, pair[0].2 + 1, "tokens: {all:?}");
    }
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
    assert!(b_terms.lock().unwrap().is_empty(), "b led while the server was down");
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
    cancel.cancel();
    for task in [a_task, b_task] {
        timeout(Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
    }
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
