//! The Lease lock against an in-process emulation of the Kubernetes API server's Lease
//! endpoints (`ctrlq_leader::lease_emulation`).
//!
//! The emulation serves what a real server cannot: injected faults (partitions, latency, 5xx,
//! dropped connections) and paused time. Real HTTP on 127.0.0.1, real `kube::Client`s, the API
//! server's answers for Leases (resource versions, 409 / 404 / 400 / 422 with `Status` bodies).
//! `tests/lease_apiserver.rs` makes the same kinds of checks against a real kube-apiserver. The record fixtures under `tests/fixtures` are Leases as client-go writes
//! them. Runs on paused time in a current-thread runtime shared by the server and the clients:
//! loopback delivers each write to the peer before the send returns, so the runtime always has
//! work while a request is in flight and the paused clock does not jump (the tests that check
//! exact elapsed times would fail if it did).

use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ctrlq_leader::lease_emulation::{Fault, LeaseServer};
use ctrlq_leader::{
    ConfigError, LeaderElectionConfig, LeaderElector, LeaderRecord, LeaseLock, Lock, LockError,
    lease_record,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const NAME: &str = "demo";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

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

async fn lock(server: &LeaseServer, id: &str) -> LeaseLock {
    LeaseLock::new(server.client(id).await.unwrap(), NS, NAME, id)
}

/// The kube error behind a backend failure.
fn kube_status(err: &LockError) -> Option<u16> {
    match err.source()?.downcast_ref::<kube::Error>()? {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[test]
fn record_should_round_trip_through_client_go_lease_json() {
    let lease = fixture("lease-kube-scheduler.json");
    let r = lease_record::from_spec_json(&lease["spec"]).unwrap();
    assert_eq!(
        r.holder_identity,
        "kind-control-plane_6f9a6ad2-3c4e-4c1b-8a8e-1d2b3c4d5e6f"
    );
    assert_eq!(r.lease_duration_seconds, 15);
    assert_eq!(r.leader_transitions, 1);
    // 2022-06-28T06:09:26.837773Z
    assert_eq!(r.acquire_time, at(1_656_396_566, 837_773));
    assert_eq!(r.renew_time, at(1_656_396_903, 51_294));
    assert_eq!(lease_record::to_spec_json(&r).unwrap(), lease["spec"]);

    let released = fixture("lease-released.json");
    let r = lease_record::from_spec_json(&released["spec"]).unwrap();
    assert!(r.is_free());
    assert_eq!((r.lease_duration_seconds, r.leader_transitions), (1, 7));
    assert_eq!(lease_record::to_spec_json(&r).unwrap(), released["spec"]);

    // Writing the record back onto a coordinated Lease changes only the record's fields.
    let coordinated = fixture("lease-coordinated.json");
    let r = lease_record::from_spec_json(&coordinated["spec"]).unwrap();
    assert_eq!(r.renew_time, at(1_772_445_917, 123_456));
    assert_eq!(
        lease_record::apply_to_lease_json(&r, &coordinated).unwrap(),
        coordinated
    );
}

#[test]
fn record_times_should_be_written_with_exactly_six_fractional_digits() {
    let mut r = record("a", 0);
    r.acquire_time = at(1_700_000_000, 0);
    r.renew_time = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let spec = lease_record::to_spec_json(&r).unwrap();
    assert_eq!(spec["acquireTime"], "2023-11-14T22:13:20.000000Z");
    assert_eq!(spec["renewTime"], "2023-11-14T22:13:20.123456Z");
    assert_eq!(
        spec,
        json!({
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2023-11-14T22:13:20.000000Z",
            "renewTime": "2023-11-14T22:13:20.123456Z",
            "leaseTransitions": 0
        })
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_create_get_and_replace_with_the_resource_version() {
    let server = LeaseServer::start();
    let a = lock(&server, "a").await;
    assert!(matches!(a.get().await, Err(LockError::NotFound)));
    let v1 = a.create(record("a", 0)).await.unwrap();
    let stored = server.lease(NS, NAME).unwrap();
    assert_eq!(stored["metadata"]["resourceVersion"], v1.as_str());
    assert_eq!(
        stored["spec"],
        lease_record::to_spec_json(&record("a", 0)).unwrap()
    );
    let got = a.get().await.unwrap();
    assert_eq!(got.version, v1);
    assert_eq!(got.record, record("a", 0));
    let v2 = a.update(record("a", 1)).await.unwrap();
    assert_ne!(v1, v2);
    let puts: Vec<_> = server
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.status))
        .collect();
    let item = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}");
    let coll = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    assert_eq!(
        puts,
        [
            ("GET".to_owned(), item.clone(), Some(404)),
            ("POST".to_owned(), coll, Some(201)),
            ("GET".to_owned(), item.clone(), Some(200)),
            ("PUT".to_owned(), item, Some(200)),
        ]
    );
    assert_eq!(a.describe(), "default/demo");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_map_each_api_error() {
    let server = LeaseServer::start();
    let a = lock(&server, "a").await;
    let b = lock(&server, "b").await;
    // update before any read: a conflict, and nothing is sent.
    assert!(matches!(
        a.update(record("a", 0)).await,
        Err(LockError::Conflict)
    ));
    assert!(server.requests().is_empty());
    a.create(record("a", 0)).await.unwrap();
    // 409 AlreadyExists on create.
    assert!(matches!(
        b.create(record("b", 0)).await,
        Err(LockError::AlreadyExists)
    ));
    // 409 Conflict on a stale replace: a third party rewrote the Lease.
    b.get().await.unwrap();
    assert!(server.modify(NS, NAME, |l| l["spec"]["holderIdentity"] = json!("kubectl")));
    assert!(matches!(
        b.update(record("b", 1)).await,
        Err(LockError::Conflict)
    ));
    // A replace of a deleted Lease (with its uid, as last read): 409, a conflict.
    b.get().await.unwrap();
    assert!(server.delete(NS, NAME));
    assert!(matches!(
        b.update(record("b", 1)).await,
        Err(LockError::Conflict)
    ));
    assert!(matches!(b.get().await, Err(LockError::NotFound)));
    // 500: the backend error with kube's status as its source.
    server.fail_next("a", &[Fault::InternalError]);
    let err = a.get().await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)));
    assert_eq!(kube_status(&err), Some(500));
    // A dropped connection: a backend (transport) error.
    server.fail_next("a", &[Fault::DropConnection]);
    let err = a.get().await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert_eq!(kube_status(&err), None);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_bound_every_request_by_its_timeout() {
    let server = LeaseServer::start();
    let a = lock(&server, "a")
        .await
        .request_timeout(Duration::from_secs(2));
    a.create(record("a", 0)).await.unwrap();
    // A partitioned server never answers: each request gives up at the timeout.
    server.partition("a", true);
    let start = Instant::now();
    let err = a.get().await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let source = err.source().unwrap();
    assert!(
        source
            .downcast_ref::<ctrlq_leader::RequestTimedOut>()
            .is_some(),
        "{source}"
    );
    server.partition("a", false);
    // A slow server: latency above the timeout fails the same way; below it answers.
    server.latency("a", Duration::from_secs(3));
    assert!(matches!(a.get().await, Err(LockError::Backend(_))));
    server.latency("a", Duration::from_secs(1));
    let start = Instant::now();
    a.get().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

/// `list` reads the namespace's Leases carrying the lock's labels, narrowed to a name prefix,
/// in name order; other Leases (unlabelled, another controller's, another namespace's) are
/// not listed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn list_should_select_by_label_and_name_prefix() {
    let server = LeaseServer::start();
    let client = server.client("a").await.unwrap();
    let labelled = |name: &str, controller: &str| {
        LeaseLock::new(client.clone(), NS, name, "a").label("ctrlq.io/controller", controller)
    };
    labelled("pods-member-b", "pods")
        .create(record("b", 0))
        .await
        .unwrap();
    labelled("pods-member-a", "pods")
        .create(record("a", 3))
        .await
        .unwrap();
    labelled("pods-shard-0", "pods")
        .create(record("a", 1))
        .await
        .unwrap();
    labelled("jobs-member-a", "jobs")
        .create(record("a", 0))
        .await
        .unwrap();
    LeaseLock::new(client.clone(), NS, "pods-member-z", "z")
        .create(record("z", 0))
        .await
        .unwrap();
    LeaseLock::new(client.clone(), "other", "pods-member-c", "c")
        .label("ctrlq.io/controller", "pods")
        .create(record("c", 0))
        .await
        .unwrap();
    let listed = labelled("pods-member-a", "pods")
        .list("pods-member-")
        .await
        .unwrap();
    let seen: Vec<_> = listed
        .iter()
        .map(|(name, v)| (name.as_str(), v.record.holder_identity.as_str()))
        .collect();
    assert_eq!(seen, [("pods-member-a", "a"), ("pods-member-b", "b")]);
    assert_eq!(listed[0].1.record.leader_transitions, 3);
    // Without labels the prefix alone narrows the namespace's Leases.
    let all = lock(&server, "a").await.list("pods-member-").await.unwrap();
    assert_eq!(all.len(), 3);
}

/// A request timeout longer than the renew deadline would never apply (the deadline cuts the
/// renew short first): the elector refuses it, also for the default timeout beside a short
/// deadline.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn elector_should_refuse_a_request_timeout_above_the_renew_deadline() {
    let server = LeaseServer::start();
    let short = LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(2))
        .retry_period(Duration::from_millis(500));
    let default_timeout = lock(&server, "a").await;
    assert_eq!(
        Lock::request_timeout(&default_timeout),
        Some(ctrlq_leader::DEFAULT_REQUEST_TIMEOUT)
    );
    let err = LeaderElector::new(default_timeout, short.clone()).unwrap_err();
    assert_eq!(
        err,
        ConfigError::RequestTimeoutAboveRenewDeadline {
            request_timeout: ctrlq_leader::DEFAULT_REQUEST_TIMEOUT,
            renew_deadline: Duration::from_secs(2),
        }
    );
    let at_deadline = lock(&server, "a")
        .await
        .request_timeout(Duration::from_secs(2));
    assert!(LeaderElector::new(at_deadline, short).is_ok());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_see_429_only_when_kube_retries_are_off_or_exhausted() {
    let server = LeaseServer::start();
    // kube-rs's default client retries a 429 after its Retry-After.
    let a = lock(&server, "a").await;
    a.create(record("a", 0)).await.unwrap();
    server.fail_next(
        "a",
        &[Fault::TooManyRequests {
            retry_after_secs: 1,
        }],
    );
    let start = Instant::now();
    a.get().await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    // Retries off: the 429 is the backend error.
    let mut config = server.config("b").await.unwrap();
    config.default_retry = false;
    let b = LeaseLock::new(kube::Client::try_from(config).unwrap(), NS, NAME, "b");
    server.fail_next(
        "b",
        &[Fault::TooManyRequests {
            retry_after_secs: 1,
        }],
    );
    let err = b.get().await.unwrap_err();
    assert_eq!(kube_status(&err), Some(429));
    // Retries on but the 429s last longer than the request timeout: bounded.
    let c = lock(&server, "c")
        .await
        .request_timeout(Duration::from_secs(3));
    server.fail_next(
        "c",
        &[Fault::TooManyRequests {
            retry_after_secs: 2,
        }; 5],
    );
    let start = Instant::now();
    assert!(c.get().await.is_err());
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn update_should_keep_the_fields_the_lock_does_not_own() {
    let server = LeaseServer::start();
    let mut lease = fixture("lease-coordinated.json");
    lease["metadata"]["namespace"] = json!(NS);
    lease["metadata"]["name"] = json!(NAME);
    server.insert(NS, NAME, lease.clone());
    let a = lock(&server, "a").await;
    let got = a.get().await.unwrap();
    assert_eq!(got.record.holder_identity, "my-controller-7d9f8b-abcde");
    assert_eq!(got.record.leader_transitions, 4);
    a.update(record("a", 5)).await.unwrap();
    let stored = server.lease(NS, NAME).unwrap();
    for field in ["labels", "annotations", "ownerReferences", "uid"] {
        assert_eq!(
            stored["metadata"][field], lease["metadata"][field],
            "{field}"
        );
    }
    assert_eq!(stored["spec"]["strategy"], "OldestEmulationVersion");
    assert_eq!(
        stored["spec"]["preferredHolder"],
        "my-controller-7d9f8b-fghij"
    );
    assert_eq!(stored["spec"]["holderIdentity"], "a");
    assert_eq!(stored["spec"]["leaseTransitions"], 5);
    assert_eq!(stored["spec"]["renewTime"], "2023-11-14T22:13:25.123456Z");
}

/// One HTTP/1.1 request over a plain socket; returns the status, the JSON body and the head.
async fn raw(url: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, String) {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let json = serde_json::from_str(body).unwrap_or(Value::Null);
    (status, json, head.to_ascii_lowercase())
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn emulation_should_answer_as_the_api_server_does() {
    let server = LeaseServer::start();
    let url = server.endpoint("raw").await.unwrap();
    let item = "/apis/coordination.k8s.io/v1/namespaces/default/leases/x";
    let coll = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = |spec: Value| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "x"}, "spec": spec})
    };
    let good = json!({"holderIdentity": "a", "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T00:00:00.000001Z", "renewTime": "2026-01-01T00:00:00.000001Z",
        "leaseTransitions": 0});

    let (code, body, _) = raw(&url, "GET", item, None).await;
    assert_eq!(code, 404);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "NotFound");
    assert_eq!(
        body["message"],
        "leases.coordination.k8s.io \"x\" not found"
    );

    // A PUT without resourceVersion creates a missing Lease (create on update).
    let (code, created, _) = raw(&url, "PUT", item, Some(&lease(good.clone()))).await;
    assert_eq!(code, 201);
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // ... but on an existing one it is refused: no unconditional update.
    let (code, body, _) = raw(&url, "PUT", item, Some(&lease(good.clone()))).await;
    assert_eq!(code, 422);
    assert_eq!(body["reason"], "Invalid");
    assert!(
        body["message"].as_str().unwrap().contains(
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
        )
    );
    // POST of an existing name.
    let (code, body, _) = raw(&url, "POST", coll, Some(&lease(good.clone()))).await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );

    // The same object again keeps its version; a change bumps it; a stale one conflicts.
    let mut same = created.clone();
    same["unknownField"] = json!(1);
    same["spec"]["bogus"] = json!(true);
    let (code, body, head) = raw(&url, "PUT", item, Some(&same)).await;
    assert_eq!(code, 200);
    assert!(
        head.contains(r#"warning: 299 - "unknown field \"unknownfield\"""#),
        "{head}"
    );
    assert!(
        head.contains(r#"warning: 299 - "unknown field \"spec.bogus\"""#),
        "{head}"
    );
    assert!(body["spec"].get("bogus").is_none());
    assert_eq!(body["metadata"]["resourceVersion"], rv.as_str());
    assert!(body.get("unknownField").is_none(), "unknown fields dropped");
    let mut changed = created.clone();
    changed["spec"]["holderIdentity"] = json!("b");
    let (code, body, _) = raw(&url, "PUT", item, Some(&changed)).await;
    assert_eq!(code, 200);
    assert_ne!(body["metadata"]["resourceVersion"], rv.as_str());
    let (code, body, _) = raw(&url, "PUT", item, Some(&changed)).await;
    assert_eq!(code, 409);
    assert_eq!(body["reason"], "Conflict");
    assert_eq!(
        body["message"],
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"x\": the object has been \
         modified; please apply your changes to the latest version and try again"
    );

    // Decoding errors: 400.
    let mut bad = good.clone();
    bad["renewTime"] = json!("2026-01-01T00:00:00.123Z");
    let (code, body, _) = raw(&url, "POST", coll, Some(&lease(bad))).await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    let mut bad = good.clone();
    bad["leaseDurationSeconds"] = json!("15");
    assert_eq!(raw(&url, "POST", coll, Some(&lease(bad))).await.0, 400);
    // Validation errors: 422 with causes.
    let mut bad = good.clone();
    bad["leaseDurationSeconds"] = json!(0);
    let (code, body, _) = raw(&url, "POST", coll, Some(&lease(bad))).await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "spec.leaseDurationSeconds"
    );
    let mut bad = good.clone();
    bad["leaseTransitions"] = json!(-1);
    assert_eq!(raw(&url, "POST", coll, Some(&lease(bad))).await.0, 422);
    let mut bad = good.clone();
    bad["preferredHolder"] = json!("b");
    assert_eq!(raw(&url, "POST", coll, Some(&lease(bad))).await.0, 422);

    // DELETE, then it is gone.
    let (code, body, _) = raw(&url, "DELETE", item, None).await;
    assert_eq!((code, body["status"].as_str()), (200, Some("Success")));
    assert_eq!(raw(&url, "GET", item, None).await.0, 404);
    assert!(server.lease("default", "x").is_none());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn emulation_should_drop_coordinated_fields_when_the_feature_is_off() {
    let server = LeaseServer::start();
    server.coordinated(false);
    let url = server.endpoint("raw").await.unwrap();
    let mut lease = fixture("lease-coordinated.json");
    lease["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let (code, body, _) = raw(
        &url,
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        Some(&lease),
    )
    .await;
    assert_eq!(code, 201);
    assert!(body["spec"].get("strategy").is_none());
    assert!(body["spec"].get("preferredHolder").is_none());
    assert_eq!(body["metadata"]["labels"], lease["metadata"]["labels"]);
}

// --- Electors contending through the emulation -------------------------------------------

fn config(seed: u64) -> LeaderElectionConfig {
    LeaderElectionConfig::default()
        .lease_duration(Duration::from_secs(15))
        .renew_deadline(Duration::from_secs(10))
        .retry_period(Duration::from_secs(2))
        .jitter_seed(seed)
}

#[derive(Debug, Clone)]
struct Term {
    who: String,
    fencing: u64,
    start: Instant,
    end: Option<Instant>,
}

type Terms = Arc<Mutex<Vec<Term>>>;

struct EndOnDrop(Terms, usize);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        let mut t = self.0.lock().unwrap();
        if t[self.1].end.is_none() {
            t[self.1].end = Some(Instant::now());
        }
    }
}

struct Candidate {
    elector: Arc<LeaderElector<LeaseLock>>,
    task: tokio::task::JoinHandle<()>,
}

async fn candidate(server: &LeaseServer, id: &str, seed: u64, terms: &Terms) -> Candidate {
    let elector = Arc::new(LeaderElector::new(lock(server, id).await, config(seed)).unwrap());
    let (e, terms, id) = (elector.clone(), terms.clone(), id.to_owned());
    let task = tokio::spawn(async move {
        loop {
            let (terms, id) = (terms.clone(), id.clone());
            e.run(CancellationToken::new(), |l| async move {
                let idx = {
                    let mut t = terms.lock().unwrap();
                    t.push(Term {
                        who: id,
                        fencing: l.fencing_token(),
                        start: Instant::now(),
                        end: None,
                    });
                    t.len() - 1
                };
                let _end = EndOnDrop(terms, idx);
                l.token().cancelled().await;
            })
            .await;
        }
    });
    Candidate { elector, task }
}

/// Checks no two terms overlap and fencing tokens strictly increase; returns the terms.
fn check_terms(terms: &Terms) -> Vec<Term> {
    let mut t = terms.lock().unwrap().clone();
    t.sort_by_key(|t| t.start);
    for w in t.windows(2) {
        let end = w[0].end.expect("only the last term may be open");
        assert!(end <= w[1].start, "two leaders at once: {w:?}");
        assert!(w[1].fencing > w[0].fencing, "fencing not increasing: {w:?}");
    }
    t
}

async fn wait_for_term(terms: &Terms, n: usize) -> Instant {
    timeout(Duration::from_secs(120), async {
        loop {
            if let Some(t) = terms.lock().unwrap().get(n) {
                return t.start;
            }
            sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a new term within 120 s")
}

fn leader_index(cands: &[Candidate]) -> usize {
    cands
        .iter()
        .position(|c| c.elector.is_leader())
        .expect("one candidate leads")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn three_lease_electors_should_fail_over_when_the_leader_is_killed() {
    let server = LeaseServer::start();
    let terms = Terms::default();
    let mut cands = Vec::new();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        cands.push(candidate(&server, id, i as u64 + 1, &terms).await);
    }
    wait_for_term(&terms, 0).await;
    for kill in 0..3 {
        sleep(Duration::from_secs(7)).await;
        let i = leader_index(&cands);
        let last_renew = cands[i].elector.observed_at();
        cands[i].task.abort();
        let next = wait_for_term(&terms, kill + 1).await;
        let failover = next - last_renew;
        // The formula's bound: lease duration + the acquire loop's longest wait (2.2 RP) after
        // the follower last saw a change, which is at most 2.2 RP after the last renew.
        assert!(failover >= Duration::from_secs(15), "{failover:?}");
        assert!(
            failover <= Duration::from_secs(15) + Duration::from_millis(8800),
            "{failover:?}"
        );
        // the killed candidate comes back under its identity.
        let id = cands[i].elector.identity().to_owned();
        cands[i] = candidate(&server, &id, 100 + kill as u64, &terms).await;
    }
    let t = check_terms(&terms);
    assert_eq!(t.len(), 4);
    assert!(t.windows(2).all(|w| w[0].who != w[1].who), "{t:?}");
    for c in &cands {
        c.task.abort();
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_partitioned_lease_leader_should_step_down_before_another_leads() {
    let server = LeaseServer::start();
    let terms = Terms::default();
    let mut cands = Vec::new();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        cands.push(candidate(&server, id, i as u64 + 1, &terms).await);
    }
    wait_for_term(&terms, 0).await;
    sleep(Duration::from_secs(5)).await;
    let i = leader_index(&cands);
    let id = cands[i].elector.identity().to_owned();
    let last_renew = cands[i].elector.observed_at();
    server.partition(&id, true);
    let next = wait_for_term(&terms, 1).await;
    let t = check_terms(&terms);
    assert_eq!(t[0].who, id);
    assert_ne!(t[1].who, id);
    let stepped_down = t[0].end.unwrap();
    assert!(stepped_down - last_renew <= Duration::from_secs(12));
    assert!(next - last_renew >= Duration::from_secs(15));
    // healed, the old leader follows.
    server.partition(&id, false);
    sleep(Duration::from_secs(60)).await;
    let t = check_terms(&terms);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(!cands[i].elector.is_leader());
    for c in &cands {
        c.task.abort();
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lease_electors_should_keep_one_leader_under_a_slow_and_failing_server() {
    let server = LeaseServer::start();
    let terms = Terms::default();
    let mut cands = Vec::new();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        cands.push(candidate(&server, id, i as u64 + 1, &terms).await);
    }
    wait_for_term(&terms, 0).await;
    // Slow answers for everyone, some failures, a third party rewriting the Lease.
    for id in ["a", "b", "c"] {
        server.latency(id, Duration::from_millis(1500));
        server.fail_next(
            id,
            &[
                Fault::InternalError,
                Fault::DropConnection,
                Fault::InternalError,
            ],
        );
    }
    sleep(Duration::from_secs(30)).await;
    server.modify(NS, NAME, |l| {
        l["metadata"]["labels"] = json!({"touched": "yes"});
    });
    sleep(Duration::from_secs(60)).await;
    let t = check_terms(&terms);
    assert!(!t.is_empty());
    let stored = server.lease(NS, NAME).unwrap();
    assert_eq!(stored["metadata"]["labels"]["touched"], "yes");
    for c in &cands {
        c.task.abort();
    }
}

/// The seeded fault simulation (kills, partitions, slow answers, 500s, a third party rewriting
/// the Lease) over `LeaseLock`s through the emulation: never two leaders, and every failover
/// after a kill within the formula's bound.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lease_simulation_with_faults_should_never_overlap() {
    use ctrlq_leader::simulation::{LeaseBackend, simulate_with};
    for seed in 1..=4 {
        let backend = LeaseBackend(Arc::new(LeaseServer::start()));
        let report = timeout(
            Duration::from_secs(24 * 3600),
            simulate_with(backend, config(seed), seed, 3, 3, true),
        )
        .await
        .expect("the simulation ends");
        assert_eq!(report.overlaps, 0, "seed {seed}: {report:?}");
        assert_eq!(report.failovers.len(), 3);
    }
    let backend = LeaseBackend(Arc::new(LeaseServer::start()));
    let report = simulate_with(backend, config(9), 9, 3, 20, false).await;
    assert_eq!(report.overlaps, 0);
    for f in &report.failovers {
        assert!(
            *f <= Duration::from_secs(15) + Duration::from_millis(8800),
            "{f:?}"
        );
    }
}

proptest::proptest! {
    /// Any record with whole-microsecond times (what a Lease stores) survives the Lease JSON
    /// unchanged, and its times are written with exactly six fractional digits.
    #[test]
    fn any_record_should_round_trip_through_the_lease_json(
        holder in "[a-z0-9-]{0,20}",
        duration in 1u32..100_000,
        transitions in 0u32..i32::MAX as u32,
        acquire_us in -62_135_596_800_000_000i64..253_402_300_799_999_999,
        renew_us in 0i64..4_000_000_000_000_000,
    ) {
        let time = |us: i64| {
            let d = Duration::from_micros(us.unsigned_abs());
            if us >= 0 { SystemTime::UNIX_EPOCH + d } else { SystemTime::UNIX_EPOCH - d }
        };
        let r = LeaderRecord {
            holder_identity: holder,
            lease_duration_seconds: duration,
            acquire_time: time(acquire_us),
            renew_time: time(renew_us),
            leader_transitions: transitions,
        };
        let spec = lease_record::to_spec_json(&r).unwrap();
        for field in ["acquireTime", "renewTime"] {
            let t = spec[field].as_str().unwrap();
            let frac = t.rsplit_once('.').unwrap().1;
            proptest::prop_assert_eq!(frac.len(), 7, "{}", t); // six digits and the Z
        }
        proptest::prop_assert_eq!(lease_record::from_spec_json(&spec).unwrap(), r);
    }
}

/// A Lease held by a Go controller (as client-go writes it): our elector waits out the lease on
/// its own clock, then takes over with one more transition, keeping what it does not own.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn elector_should_take_over_a_lease_written_by_client_go_after_it_expires() {
    let server = LeaseServer::start();
    let mut lease = fixture("lease-coordinated.json");
    lease["metadata"]["namespace"] = json!(NS);
    lease["metadata"]["name"] = json!(NAME);
    server.insert(NS, NAME, lease.clone());
    let e = LeaderElector::new(lock(&server, "a").await, config(1)).unwrap();
    let start = Instant::now();
    let (at, fencing) = timeout(
        Duration::from_secs(60),
        e.run(CancellationToken::new(), |l| async move {
            (Instant::now(), l.fencing_token())
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(at - start >= Duration::from_secs(15), "{:?}", at - start);
    assert_eq!(fencing, 5, "leaseTransitions 4 + 1");
    let stored = server.lease(NS, NAME).unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "a");
    assert_eq!(stored["spec"]["leaseTransitions"], 5);
    assert_eq!(stored["spec"]["strategy"], lease["spec"]["strategy"]);
    assert_eq!(stored["metadata"]["labels"], lease["metadata"]["labels"]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn writes_should_name_a_field_manager_and_every_request_a_user_agent() {
    let server = LeaseServer::start();
    let defaults = lock(&server, "a").await;
    assert!(defaults.create(record("a", 0)).await.is_ok());
    let custom = lock(&server, "b")
        .await
        .field_manager("my-controller")
        .user_agent("my-controller/1.2 (\u{e9}\n)");
    custom.get().await.unwrap();
    custom.update(record("b", 1)).await.unwrap();

    let seen: Vec<_> = server
        .requests()
        .into_iter()
        .map(|r| (r.method, r.user_agent, r.field_manager))
        .collect();
    let ua = |s: &str| Some(s.to_string());
    assert_eq!(
        seen,
        [
            (
                "POST".into(),
                ua(ctrlq_leader::DEFAULT_USER_AGENT),
                ua("ctrlq-leader")
            ),
            ("GET".into(), ua("my-controller/1.2 (??)"), None),
            (
                "PUT".into(),
                ua("my-controller/1.2 (??)"),
                ua("my-controller")
            ),
        ]
    );
    assert_eq!(ctrlq_leader::DEFAULT_FIELD_MANAGER, "ctrlq-leader");
}
