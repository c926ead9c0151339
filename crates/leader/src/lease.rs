//! The Kubernetes Lease lock: one `coordination.k8s.io/v1` Lease, compare-and-set on its
//! `resourceVersion`, as client-go's `LeaseLock`.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{RoundMode, Timestamp, TimestampRound, Unit};
use std::collections::BTreeMap;

use kube::api::{GetParams, ListParams, PostParams};
use kube::core::request::Error as RequestError;
use kube::core::{ObjectList, Request};
use parking_lot::Mutex;

use crate::{DEFAULT_REQUEST_TIMEOUT, LeaderRecord, Lock, LockError, RequestTimedOut, Versioned};

/// A [`Lock`] on a Kubernetes `Lease` (`coordination.k8s.io/v1`), as client-go's `LeaseLock`:
/// what kube-controller-manager, kube-scheduler and controller-runtime managers elect on, so a
/// Go controller and this crate's elector can contend for the same Lease.
///
/// - `get` reads the Lease; `create` posts it; `update` replaces it with the `resourceVersion`
///   of the Lease this lock last read or wrote, so the API server's optimistic concurrency is
///   the compare-and-set. Before any read, `update` fails with [`LockError::Conflict`] and
///   sends nothing.
/// - The record maps to the spec as client-go's `LeaderElectionRecordToLeaseSpec`:
///   `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime` (`MicroTime`, whole
///   microseconds), `leaseTransitions`. Everything else on the Lease (labels, annotations,
///   owner references, `spec.strategy`, `spec.preferredHolder`) is kept on every update.
/// - Errors as the API server gives them: 404 on get or replace is [`LockError::NotFound`]; 409
///   on create is [`LockError::AlreadyExists`], on replace [`LockError::Conflict`]; anything else
///   (5xx, 429, transport, the [request timeout](Self::request_timeout), and a 404 on create,
///   which says the Lease's namespace does not exist) is [`LockError::Backend`] with the kube
///   error as its source, so the elector counts it as a failure.
/// - The fencing token ([`Lock::fencing_token`]) is `leaseTransitions`, which the elector
///   increments on every grant: it restarts at 0 if the Lease is deleted (a `resourceVersion`
///   is opaque, so it cannot serve).
///
/// The crate never enables a `k8s-openapi` Kubernetes version feature: the application does
/// (for example `k8s-openapi = { version = "0.29", features = ["latest"] }`), and picks a TLS
/// backend through its own `kube` dependency.
///
/// # Examples
///
/// On a real cluster (in-cluster config or the kubeconfig):
///
/// ```no_run
/// use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
/// use tokio_util::sync::CancellationToken;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube::Client::try_default().await?;
/// let pod = std::env::var("POD_NAME")?;
/// let lock = LeaseLock::new(client, "kube-system", "my-controller", pod);
/// let elector = LeaderElector::new(lock, LeaderElectionConfig::default().release_on_cancel(true))?;
/// elector.run(CancellationToken::new(), |leadership| async move {
///     leadership.token().cancelled().await;
/// }).await;
/// # Ok(())
/// # }
/// ```
pub struct LeaseLock {
    client: kube::Client,
    /// Builds the requests on the Lease's collection.
    request: Request,
    /// Sent as `fieldManager` on create and replace: the Lease's `managedFields` name it.
    field_manager: String,
    /// Sent as `User-Agent` on every request: the API server's audit log names it.
    user_agent: http::HeaderValue,
    namespace: String,
    name: String,
    identity: String,
    timeout: Duration,
    /// Whether `timeout` was set explicitly (else an elector fits it to its renew deadline).
    timeout_set: bool,
    /// Labels written on create; `list` selects by them.
    labels: BTreeMap<String, String>,
    /// The Lease as last read or written; `update` replaces this object.
    cached: Mutex<Option<Lease>>,
}

/// The API server answered with a Lease this lock cannot read.
#[derive(Debug, thiserror::Error)]
#[error("malformed Lease: {0}")]
struct Malformed(&'static str);

/// The default [`LeaseLock::field_manager`]: the crate's name, as client-go's default user
/// agent names the binary.
pub const DEFAULT_FIELD_MANAGER: &str = env!("CARGO_PKG_NAME");

/// The default [`LeaseLock::user_agent`]: the crate's name and version.
pub const DEFAULT_USER_AGENT: &str =
    concat!(env!("CARGO_PKG_NAME"), "/", env!("CARGO_PKG_VERSION"));

impl LeaseLock {
    /// A lock on the Lease `namespace/name` for the candidate `identity`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) {
    /// let lock = ctrlq_leader::LeaseLock::new(client, "default", "my-controller", "pod-a");
    /// assert_eq!(ctrlq_leader::Lock::describe(&lock), "default/my-controller");
    /// # }
    /// ```
    #[must_use]
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        let namespace = namespace.into();
        let url = <Lease as kube::Resource>::url_path(&(), Some(&namespace));
        Self {
            client,
            request: Request::new(url),
            field_manager: DEFAULT_FIELD_MANAGER.to_owned(),
            user_agent: http::HeaderValue::from_static(DEFAULT_USER_AGENT),
            namespace,
            name: name.into(),
            identity: identity.into(),
            timeout: DEFAULT_REQUEST_TIMEOUT,
            timeout_set: false,
            labels: BTreeMap::new(),
            cached: Mutex::new(None),
        }
    }

    /// Bounds each request, including kube-rs's own retries of 429, 503 and 504. By default
    /// [`DEFAULT_REQUEST_TIMEOUT`], and under an elector client-go's `max(1 s, renew
    /// deadline / 2)`, at most the renew deadline ([`Lock::fit_request_timeout`]), so any
    /// valid election timing works with the default. A bound set here must not exceed the
    /// renew deadline: [`LeaderElector::new`](crate::LeaderElector::new) refuses a lock whose
    /// bound is longer ([`ConfigError::RequestTimeoutAboveRenewDeadline`](crate::ConfigError)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) {
    /// use std::time::Duration;
    /// let lock = ctrlq_leader::LeaseLock::new(client, "default", "my-controller", "pod-a")
    ///     .request_timeout(Duration::from_secs(2));
    /// # }
    /// ```
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.timeout_set = true;
        self
    }

    /// Adds a label that the Lease gets when this lock creates it, and that [`Lock::list`]
    /// selects by (a sharded controller labels its shard and member Leases with its name, so
    /// listing them reads no other Lease of the namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) {
    /// let lock = ctrlq_leader::LeaseLock::new(client, "default", "pods-member-a", "a")
    ///     .label("ctrlq.io/controller", "pods");
    /// # }
    /// ```
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Names this candidate's writes in the Lease's `managedFields` (the `fieldManager` of each
    /// create and replace; default [`DEFAULT_FIELD_MANAGER`]). The API server accepts at most
    /// 128 characters.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) {
    /// let lock = ctrlq_leader::LeaseLock::new(client, "default", "my-controller", "pod-a")
    ///     .field_manager("my-controller");
    /// # }
    /// ```
    #[must_use]
    pub fn field_manager(mut self, name: impl Into<String>) -> Self {
        self.field_manager = name.into();
        self
    }

    /// The `User-Agent` of every request (default [`DEFAULT_USER_AGENT`]). Characters a header
    /// cannot carry (controls, non-ASCII) are sent as `?`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) {
    /// let lock = ctrlq_leader::LeaseLock::new(client, "default", "my-controller", "pod-a")
    ///     .user_agent("my-controller/1.2.0");
    /// # }
    /// ```
    #[must_use]
    pub fn user_agent(mut self, user_agent: &str) -> Self {
        let visible = user_agent.replace(|c: char| c != ' ' && !c.is_ascii_graphic(), "?");
        // Only visible ASCII and spaces remain, which a header value always accepts.
        if let Ok(v) = http::HeaderValue::try_from(visible) {
            self.user_agent = v;
        }
        self
    }

    /// Sends `request` (a `verb`) with this lock's user agent, bounded by the request timeout.
    /// Errors as the API server gives them: a 404 on get or replace is [`LockError::NotFound`]
    /// (on create the namespace is missing: a backend failure), a 409 on create
    /// [`LockError::AlreadyExists`], on get or replace [`LockError::Conflict`], anything else a
    /// backend failure.
    async fn send<T: k8s_openapi::serde::de::DeserializeOwned>(
        &self,
        request: Result<http::Request<Vec<u8>>, RequestError>,
        verb: Verb,
    ) -> Result<T, LockError> {
        let request = async {
            let mut request = request.map_err(kube::Error::BuildRequest)?;
            let agent = self.user_agent.clone();
            request
                .headers_mut()
                .insert(http::header::USER_AGENT, agent);
            self.client.request::<T>(request).await
        };
        match tokio::time::timeout(self.timeout, request).await {
            Err(_) => Err(LockError::Backend(Box::new(RequestTimedOut(self.timeout)))),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kube::Error::Api(status))) if status.code == 404 && verb != Verb::Create => {
                Err(LockError::NotFound)
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(match verb {
                Verb::Create => LockError::AlreadyExists,
                Verb::Get | Verb::Replace => LockError::Conflict,
            }),
            Ok(Err(e)) => Err(LockError::Backend(Box::new(e))),
        }
    }

    /// Writes `lease` with `request` (a create or a replace, given the post parameters and the
    /// body), caches the Lease the API server answers and returns its version.
    async fn write(
        &self,
        lease: &Lease,
        verb: Verb,
        request: impl FnOnce(&PostParams, Vec<u8>) -> Result<http::Request<Vec<u8>>, RequestError>,
    ) -> Result<String, LockError> {
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        let body = serde_json::to_vec(lease).map_err(kube::Error::SerdeError);
        let body = body.map_err(|e| LockError::Backend(Box::new(e)))?;
        let written = self.send(request(&params, body), verb).await?;
        self.seen(written).map(|v| v.version)
    }

    /// Caches `lease` and returns its record and version.
    fn seen(&self, lease: Lease) -> Result<Versioned, LockError> {
        let versioned = versioned(&lease)?;
        *self.cached.lock() = Some(lease);
        Ok(versioned)
    }
}

/// The request a response answers, which decides what its 404 and 409 mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Create,
    Replace,
}

/// The record and version of `lease`.
fn versioned(lease: &Lease) -> Result<Versioned, LockError> {
    let version = lease.metadata.resource_version.clone();
    let version =
        version.ok_or_else(|| LockError::Backend(Box::new(Malformed("no resourceVersion"))))?;
    let record = spec_to_record(lease.spec.as_ref().unwrap_or(&LeaseSpec::default()));
    Ok(Versioned { record, version })
}

/// client-go's `LeaderElectionRecordToLeaseSpec`, onto `spec` (whose other fields stay).
pub(crate) fn record_to_spec(record: &LeaderRecord, spec: Option<LeaseSpec>) -> Option<LeaseSpec> {
    Some(LeaseSpec {
        holder_identity: Some(record.holder_identity.clone()),
        lease_duration_seconds: Some(
            i32::try_from(record.lease_duration_seconds).unwrap_or(i32::MAX),
        ),
        acquire_time: Some(micro_time(record.acquire_time)),
        renew_time: Some(micro_time(record.renew_time)),
        lease_transitions: Some(i32::try_from(record.leader_transitions).unwrap_or(i32::MAX)),
        ..spec.unwrap_or_default()
    })
}

/// client-go's `LeaseSpecToLeaderElectionRecord`: absent fields are zero (times: the epoch).
pub(crate) fn spec_to_record(spec: &LeaseSpec) -> LeaderRecord {
    let time = |t: &Option<MicroTime>| t.as_ref().map_or(SystemTime::UNIX_EPOCH, system_time);
    LeaderRecord {
        holder_identity: spec.holder_identity.clone().unwrap_or_default(),
        lease_duration_seconds: spec
            .lease_duration_seconds
            .map_or(0, |d| u32::try_from(d).unwrap_or(0)),
        acquire_time: time(&spec.acquire_time),
        renew_time: time(&spec.renew_time),
        leader_transitions: spec
            .lease_transitions
            .map_or(0, |t| u32::try_from(t).unwrap_or(0)),
    }
}

/// A wall-clock time as a `MicroTime`, floored to whole microseconds as the API server stores
/// it; a time a `MicroTime` cannot hold is the epoch.
fn micro_time(t: SystemTime) -> MicroTime {
    let floor = TimestampRound::new()
        .smallest(Unit::Microsecond)
        .mode(RoundMode::Floor);
    let ts = Timestamp::try_from(t).and_then(|ts| ts.round(floor));
    MicroTime(ts.unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A `MicroTime` as a wall-clock time; one this platform's `SystemTime` cannot hold is the
/// epoch.
fn system_time(t: &MicroTime) -> SystemTime {
    let d = t.0.as_duration();
    let (epoch, magnitude) = (SystemTime::UNIX_EPOCH, d.unsigned_abs());
    let t = if d.is_negative() {
        epoch.checked_sub(magnitude)
    } else {
        epoch.checked_add(magnitude)
    };
    t.unwrap_or(epoch)
}

#[async_trait::async_trait]
impl Lock for LeaseLock {
    async fn get(&self) -> Result<Versioned, LockError> {
        let get = self.request.get(&self.name, &GetParams::default());
        let lease = self.send(get, Verb::Get).await?;
        self.seen(lease)
    }

    async fn create(&self, record: LeaderRecord) -> Result<String, LockError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: (!self.labels.is_empty()).then(|| self.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: record_to_spec(&record, None),
        };
        self.write(&lease, Verb::Create, |params, body| {
            self.request.create(params, body)
        })
        .await
    }

    async fn update(&self, record: LeaderRecord) -> Result<String, LockError> {
        let cached = self.cached.lock().clone();
        let mut lease = cached.ok_or(LockError::Conflict)?;
        lease.spec = record_to_spec(&record, lease.spec.take());
        self.write(&lease, Verb::Replace, |params, body| {
            self.request.replace(&self.name, params, body)
        })
        .await
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// One list of the namespace's Leases, selected by this lock's [labels](Self::label) when it
    /// has any, then narrowed to the names starting with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, LockError> {
        let selector: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut params = ListParams::default();
        if !selector.is_empty() {
            params = params.labels(&selector.join(","));
        }
        let leases: ObjectList<Lease> = self.send(self.request.list(&params), Verb::Get).await?;
        let mut listed = Vec::new();
        for lease in &leases.items {
            let name = lease.metadata.name.clone().unwrap_or_default();
            if name.starts_with(prefix) {
                listed.push((name, versioned(lease)?));
            }
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(listed)
    }

    fn request_timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn fit_request_timeout(&mut self, renew_deadline: Duration) {
        if !self.timeout_set {
            self.timeout = crate::error::fitted_request_timeout(renew_deadline);
        }
    }
}

impl std::fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLock")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("timeout", &self.timeout)
            .field("field_manager", &self.field_manager)
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

/// Converts between the leader record and a Lease's JSON as client-go writes it; for tests and
/// tools that inspect Leases.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let spec = serde_json::json!({
///     "holderIdentity": "pod-a",
///     "leaseDurationSeconds": 15,
///     "acquireTime": "2022-06-28T06:09:26.837773Z",
///     "renewTime": "2022-06-28T06:09:40.000001Z",
///     "leaseTransitions": 2
/// });
/// let record = ctrlq_leader::lease_record::from_spec_json(&spec)?;
/// assert_eq!(record.holder_identity, "pod-a");
/// assert_eq!(ctrlq_leader::lease_record::to_spec_json(&record)?, spec);
/// # Ok(())
/// # }
/// ```
pub mod lease_record {
    use super::{LeaseSpec, record_to_spec, spec_to_record};
    use crate::LeaderRecord;

    /// The record of a Lease `spec` object.
    ///
    /// # Errors
    ///
    /// When the JSON is not a Lease spec (wrong types, a malformed time).
    pub fn from_spec_json(spec: &serde_json::Value) -> Result<LeaderRecord, serde_json::Error> {
        let spec: LeaseSpec = serde_json::from_value(spec.clone())?;
        Ok(spec_to_record(&spec))
    }

    /// The Lease `spec` object client-go writes for `record`.
    ///
    /// # Errors
    ///
    /// Only if serialization fails, which a valid record does not.
    pub fn to_spec_json(record: &LeaderRecord) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(record_to_spec(record, None))
    }

    /// Writes `record` into an existing Lease object's `spec`, keeping every field the record does
    /// not own (metadata, `strategy`, `preferredHolder`), as the lock's update does.
    ///
    /// # Errors
    ///
    /// When `lease` is not a Lease.
    pub fn apply_to_lease_json(
        record: &LeaderRecord,
        lease: &serde_json::Value,
    ) -> Result<serde_json::Value, serde_json::Error> {
        let mut lease: k8s_openapi::api::coordination::v1::Lease =
            serde_json::from_value(lease.clone())?;
        lease.spec = record_to_spec(record, lease.spec.take());
        serde_json::to_value(lease)
    }
}
