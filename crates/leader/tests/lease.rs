//! The Lease lock's own behaviour, with no server: the record's JSON as client-go writes it
//! (fixtures under `tests/fixtures`), and, over a scripted API (`support/mock_api.rs`), what a
//! real kube-apiserver will not do on demand: each failure's mapping (404, 409, 429, 500, a
//! dropped connection), a request that never answers, under paused time. Everything the API
//! server itself decides (resource versions, validation, RBAC, field management, elections) is
//! tested against a real kube-apiserver in `tests/lease_apiserver.rs`.

#[path = "support/mock_api.rs"]
mod mock_api;

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use ctrlq_leader::{
    ConfigError, LeaderElectionConfig, LeaderElector, LeaderRecord, LeaseLock, Lock, LockError,
    lease_record,
};
use mock_api::{Answer, MockApi, lease};
use serde_json::{Value, json};
use tokio::time::Instant;

const NS: &str = "default";
const NAME: &str = "demo";
const ITEM: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/demo";
const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

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

/// The stored Lease of `record` at `resource_version`.
fn stored(record: &LeaderRecord, resource_version: &str) -> Value {
    lease(
        lease_record::to_spec_json(record).unwrap(),
        resource_version,
    )
}

/// The HTTP status behind a backend failure.
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

/// Each answer of the API server maps to one `LockError`: 404 `NotFound`, 409 on create
/// `AlreadyExists`, 409 on replace `Conflict`, and any other failure (500, 429, a dropped
/// connection) a backend error carrying kube's status where there is one.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_map_each_api_error() {
    let api = MockApi::default();
    let lock = LeaseLock::new(api.client(), NS, NAME, "a");
    // update before any read: a conflict, and nothing is sent.
    assert!(matches!(
        lock.update(record("a", 0)).await,
        Err(LockError::Conflict)
    ));
    assert!(api.seen().is_empty());

    api.answer(Answer::Failure(404, "NotFound"));
    assert!(matches!(lock.get().await, Err(LockError::NotFound)));
    api.answer(Answer::Failure(409, "AlreadyExists"));
    assert!(matches!(
        lock.create(record("a", 0)).await,
        Err(LockError::AlreadyExists)
    ));
    api.answer(Answer::Json(200, stored(&record("b", 0), "7")));
    let got = lock.get().await.unwrap();
    assert_eq!((got.version.as_str(), &got.record), ("7", &record("b", 0)));
    api.answer(Answer::Failure(409, "Conflict"));
    assert!(matches!(
        lock.update(record("a", 1)).await,
        Err(LockError::Conflict)
    ));
    for code in [500, 429, 503] {
        api.answer(Answer::Failure(code, "ServerTimeout"));
        let err = lock.get().await.unwrap_err();
        assert!(matches!(err, LockError::Backend(_)), "{err:?}");
        assert_eq!(kube_status(&err), Some(code));
    }
    api.answer(Answer::Drop);
    let err = lock.get().await.unwrap_err();
    assert!(matches!(err, LockError::Backend(_)), "{err:?}");
    assert_eq!(kube_status(&err), None);

    let sent: Vec<_> = api.seen().into_iter().map(|s| (s.method, s.path)).collect();
    let (get, item) = ("GET".to_owned(), ITEM.to_owned());
    let mut want = vec![
        (get.clone(), item.clone()),
        ("POST".to_owned(), COLLECTION.to_owned()),
        (get.clone(), item.clone()),
        ("PUT".to_owned(), item.clone()),
    ];
    want.extend(std::iter::repeat_n((get, item), 4));
    assert_eq!(sent, want);
}

/// A server that never answers: each request gives up at the lock's timeout, exactly, with
/// `RequestTimedOut` as the error's source.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lock_should_bound_every_request_by_its_timeout() {
    let api = MockApi::default();
    let lock = LeaseLock::new(api.client(), NS, NAME, "a").request_timeout(Duration::from_secs(2));
    for _ in 0..2 {
        api.answer(Answer::Hang);
    }
    let start = Instant::now();
    let err = lock.get().await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let source = err.source().unwrap();
    assert!(
        source
            .downcast_ref::<ctrlq_leader::RequestTimedOut>()
            .is_some(),
        "{source}"
    );
    let start = Instant::now();
    assert!(matches!(
        lock.create(record("a", 0)).await,
        Err(LockError::Backend(_))
    ));
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    // A default lock's timeout.
    let default = LeaseLock::new(api.client(), NS, NAME, "a");
    assert_eq!(
        Lock::request_timeout(&default),
        Some(ctrlq_leader::DEFAULT_REQUEST_TIMEOUT)
    );
}

/// A request timeout longer than the renew deadline would never apply (the deadline cuts the
/// renew short first): the elector refuses one set explicitly. A lock's default timeout is
/// fitted to the elector's renew deadline instead, as client-go's `max(1 s, renew deadline /
/// 2)` at most the deadline, so any valid timing works with the default; and the fitted bound
/// is the one its requests get.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn elector_should_fit_a_default_request_timeout_and_refuse_a_longer_set_one() {
    let api = MockApi::default();
    let timing = |rd: Duration| {
        LeaderElectionConfig::default()
            .lease_duration(Duration::from_secs(60))
            .renew_deadline(rd)
            .retry_period(rd / 4)
    };
    let short = timing(Duration::from_secs(2));
    let set_long =
        LeaseLock::new(api.client(), NS, NAME, "a").request_timeout(Duration::from_secs(5));
    let err = LeaderElector::new(set_long, short.clone()).unwrap_err();
    assert_eq!(
        err,
        ConfigError::RequestTimeoutAboveRenewDeadline {
            request_timeout: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(2),
        }
    );
    let at_deadline =
        LeaseLock::new(api.client(), NS, NAME, "a").request_timeout(Duration::from_secs(2));
    let kept = LeaderElector::new(at_deadline, short.clone()).unwrap();
    assert_eq!(kept.lock().request_timeout(), Some(Duration::from_secs(2)));
    assert!(api.seen().is_empty());

    // The default, fitted: max(1 s, rd / 2), at most rd.
    for (rd, fitted) in [
        (2_000, 1_000),
        (10_000, 5_000),
        (30_000, 15_000),
        (800, 800),
    ] {
        let rd = Duration::from_millis(rd);
        let elector = LeaderElector::new(LeaseLock::new(api.client(), NS, NAME, "a"), timing(rd));
        let elector = elector.unwrap();
        assert_eq!(
            elector.lock().request_timeout(),
            Some(Duration::from_millis(fitted))
        );
    }
    let default = LeaseLock::new(api.client(), NS, NAME, "a");
    let elector = LeaderElector::new(default, short).unwrap();
    api.answer(Answer::Hang);
    let start = Instant::now();
    let err = elector.lock().get().await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert!(
        err.source()
            .unwrap()
            .downcast_ref::<ctrlq_leader::RequestTimedOut>()
            .is_some()
    );
}

/// The lock names its Lease `namespace/name` in logs and errors and shows it, with the
/// candidate and the request settings, in its `Debug`; a create labels the Lease with the
/// lock's labels, and carries no labels when it has none.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_lock_should_name_its_lease_and_label_what_it_creates() {
    let api = MockApi::default();
    let plain = LeaseLock::new(api.client(), NS, NAME, "pod-a");
    assert_eq!(plain.identity(), "pod-a");
    assert_eq!(plain.describe(), "default/demo");
    let shown = format!("{plain:?}");
    for part in ["LeaseLock", "default", "demo", "pod-a", "ctrlq-leader"] {
        assert!(shown.contains(part), "{part} not in {shown}");
    }
    let labelled =
        LeaseLock::new(api.client(), NS, NAME, "pod-a").label("ctrlq.io/controller", "pods");
    api.answer(Answer::Json(201, stored(&record("pod-a", 0), "1")));
    plain.create(record("pod-a", 0)).await.unwrap();
    api.answer(Answer::Json(201, stored(&record("pod-a", 0), "1")));
    labelled.create(record("pod-a", 0)).await.unwrap();
    let bodies: Vec<Value> = api.seen().into_iter().map(|r| r.body.unwrap()).collect();
    assert_eq!(bodies[0]["metadata"].get("labels"), None);
    assert_eq!(
        bodies[1]["metadata"]["labels"],
        json!({"ctrlq.io/controller": "pods"})
    );
}

/// Writes name the lock's field manager (`ctrlq-leader` unless set), reads name none; every
/// request carries the lock's user agent, with what a header cannot hold replaced by `?`. The
/// body of a create is the Lease with the record as its spec.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn writes_should_name_a_field_manager_and_every_request_a_user_agent() {
    let api = MockApi::default();
    let defaults = LeaseLock::new(api.client(), NS, NAME, "a");
    api.answer(Answer::Json(201, stored(&record("a", 0), "1")));
    assert_eq!(defaults.create(record("a", 0)).await.unwrap(), "1");
    let custom = LeaseLock::new(api.client(), NS, NAME, "b")
        .field_manager("my-controller")
        .user_agent("my-controller/1.2 (\u{e9}\n)");
    api.answer(Answer::Json(200, stored(&record("a", 0), "1")));
    custom.get().await.unwrap();
    api.answer(Answer::Json(200, stored(&record("b", 1), "2")));
    assert_eq!(custom.update(record("b", 1)).await.unwrap(), "2");

    let seen = api.seen();
    let headers: Vec<_> = seen
        .iter()
        .map(|r| {
            (
                r.method.as_str(),
                r.user_agent.as_deref(),
                r.field_manager.as_deref(),
            )
        })
        .collect();
    let custom_agent = Some("my-controller/1.2 (??)");
    assert_eq!(
        headers,
        [
            (
                "POST",
                Some(ctrlq_leader::DEFAULT_USER_AGENT),
                Some("ctrlq-leader")
            ),
            ("GET", custom_agent, None),
            ("PUT", custom_agent, Some("my-controller")),
        ]
    );
    assert_eq!(ctrlq_leader::DEFAULT_FIELD_MANAGER, "ctrlq-leader");
    let created = seen[0].body.as_ref().unwrap();
    assert_eq!(created["metadata"]["name"], NAME);
    assert_eq!(
        created["spec"],
        lease_record::to_spec_json(&record("a", 0)).unwrap()
    );
    // The replace sends the Lease last read, at its resource version, with the new record.
    let replaced = seen[2].body.as_ref().unwrap();
    assert_eq!(replaced["metadata"]["resourceVersion"], "1");
    assert_eq!(
        replaced["spec"],
        lease_record::to_spec_json(&record("b", 1)).unwrap()
    );
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
