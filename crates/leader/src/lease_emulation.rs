//! An in-process emulation of the Kubernetes API server's Lease endpoints, for tests of the
//! [`LeaseLock`](crate::LeaseLock) (features `kube` and `test-util`).
//!
//! No kube-apiserver can run in these tests, so this serves
//! `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]` over real HTTP/1.1 on
//! 127.0.0.1, for real `kube::Client`s, with the API server's semantics for Leases:
//!
//! - `GET`, `POST`, `PUT` and `DELETE`; a server-assigned `resourceVersion` (an opaque decimal
//!   string from one counter) that changes on every write that changes the object, and `uid`
//!   and `creationTimestamp` on create;
//! - a `PUT` with a stale `resourceVersion` answers 409 `Conflict`; one without it answers 422
//!   `Invalid` if the Lease exists and creates it (201) if not; a `PUT` with a
//!   `resourceVersion` of a missing Lease answers 404; a `POST` of an existing name answers 409
//!   `AlreadyExists`; a missing name answers 404 `NotFound`; every error with a `Status` body
//!   worded as the API server words it;
//! - a body that cannot be decoded (not a Lease object, wrong JSON types, a `MicroTime`
//!   without exactly six fractional digits, a name or namespace that differs from the URL's)
//!   answers 400 `BadRequest`; one that decodes but is invalid (`leaseDurationSeconds` ≤ 0,
//!   `leaseTransitions` < 0, `preferredHolder` without `strategy`, a bad name) answers 422
//!   `Invalid`;
//! - unknown fields are dropped; `spec.strategy` and `spec.preferredHolder` are kept (the
//!   `CoordinatedLeaderElection` feature on) unless [`LeaseServer::coordinated`] turns it off.
//!
//! Each candidate talks to the server through its own listener ([`LeaseServer::client`]), so
//! faults apply per candidate: latency, 500s, 429s with `Retry-After`, dropped connections, a
//! partition (requests go unanswered until it heals, then the connection drops). A third party
//! can rewrite or delete the Lease ([`LeaseServer::modify`], [`LeaseServer::delete`]).
//!
//! What it does not do: authentication, watches, lists, patches, field selectors, dry runs,
//! managed fields and the `Warning` header for dropped fields.
//!
//! # Examples
//!
//! ```
//! use leader::lease_emulation::LeaseServer;
//! use leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let server = LeaseServer::start().await.unwrap();
//! let lock = LeaseLock::new(server.client("a").await.unwrap(), "default", "demo", "a");
//! let elector = LeaderElector::new(lock, LeaderElectionConfig::default()).unwrap();
//! elector.run(CancellationToken::new(), |_| async {}).await;
//! let lease = server.lease("default", "demo").unwrap();
//! assert_eq!(lease["spec"]["holderIdentity"], "a");
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";

/// The running emulation; stops serving when dropped.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let server = leader::lease_emulation::LeaseServer::start().await.unwrap();
/// assert!(server.lease("default", "x").is_none());
/// # }
/// ```
#[derive(Debug)]
pub struct LeaseServer {
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// The client name given to [`LeaseServer::client`].
    pub client: String,
    /// `GET`, `POST`, `PUT`, `DELETE`.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The status answered; `None` when the connection was dropped unanswered.
    pub status: Option<u16>,
}

/// A fault answered instead of the real answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 500 `InternalError`.
    InternalError,
    /// 429 `TooManyRequests` with `Retry-After: seconds`.
    TooManyRequests {
        /// The `Retry-After` header value.
        retry_after_secs: u32,
    },
    /// Close the connection without an answer.
    DropConnection,
}

#[derive(Debug, Default)]
struct Faults {
    latency: Duration,
    next: Vec<Fault>,
    partition: Option<watch::Sender<bool>>,
}

#[derive(Debug)]
struct State {
    leases: HashMap<(String, String), Value>,
    next_version: u64,
    next_uid: u64,
    coordinated: bool,
    faults: HashMap<String, Faults>,
    log: Vec<Logged>,
}

impl Drop for LeaseServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl LeaseServer {
    /// Starts an empty server (no listener yet; each [`client`](Self::client) gets one).
    ///
    /// # Errors
    ///
    /// Never today; kept fallible for servers that bind at start.
    pub async fn start() -> std::io::Result<Self> {
        Ok(Self {
            state: Arc::new(Mutex::new(State {
                leases: HashMap::new(),
                next_version: 1000,
                next_uid: 0,
                coordinated: true,
                faults: HashMap::new(),
                log: Vec::new(),
            })),
            stop: CancellationToken::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Opens a listener on 127.0.0.1 for the client `name` and returns its base URL.
    ///
    /// # Errors
    ///
    /// If no local port can be bound.
    pub async fn endpoint(&self, name: &str) -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (state, stop, name) = (self.state.clone(), self.stop.clone(), name.to_owned());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    () = stop.cancelled() => return,
                    r = listener.accept() => match r {
                        Ok((s, _)) => s,
                        Err(_) => continue,
                    },
                };
                let (state, name, stop) = (state.clone(), name.clone(), stop.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        serve(state.clone(), name.clone(), req)
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        () = stop.cancelled() => {}
                        _ = conn => {}
                    }
                });
            }
        });
        Ok(url)
    }

    /// A `kube::Config` for the client `name`, on its own listener (kube-rs's defaults, such as
    /// its retry of 429, 503 and 504, unchanged).
    ///
    /// # Errors
    ///
    /// If no local port can be bound.
    pub async fn config(&self, name: &str) -> std::io::Result<kube::Config> {
        let url = self.endpoint(name).await?;
        let uri = url
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        Ok(kube::Config::new(uri))
    }

    /// A `kube::Client` for the client `name` (see [`config`](Self::config)).
    ///
    /// # Errors
    ///
    /// If no local port can be bound or the client cannot be built.
    pub async fn client(&self, name: &str) -> std::io::Result<kube::Client> {
        kube::Client::try_from(self.config(name).await?).map_err(std::io::Error::other)
    }

    /// Keeps (`true`, the default) or drops `spec.strategy` and `spec.preferredHolder`, as the
    /// API server with the `CoordinatedLeaderElection` feature on or off.
    pub fn coordinated(&self, on: bool) {
        self.state().coordinated = on;
    }

    /// The stored Lease `namespace/name`, as a `GET` would return it.
    #[must_use]
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state()
            .leases
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// A third party rewrites the Lease (as `kubectl edit`): `f` changes the stored object,
    /// which then gets a new `resourceVersion`. Returns `false` if there is no such Lease.
    pub fn modify(&self, namespace: &str, name: &str, f: impl FnOnce(&mut Value)) -> bool {
        let mut s = self.state();
        s.next_version += 1;
        let rv = s.next_version.to_string();
        let Some(lease) = s.leases.get_mut(&(namespace.to_owned(), name.to_owned())) else {
            return false;
        };
        f(lease);
        lease["metadata"]["resourceVersion"] = Value::String(rv);
        true
    }

    /// A third party stores `lease` as is (for fixtures), with a new `resourceVersion`.
    pub fn insert(&self, namespace: &str, name: &str, mut lease: Value) {
        let mut s = self.state();
        s.next_version += 1;
        lease["metadata"]["resourceVersion"] = Value::String(s.next_version.to_string());
        s.leases
            .insert((namespace.to_owned(), name.to_owned()), lease);
    }

    /// A third party deletes the Lease. Returns whether it existed.
    pub fn delete(&self, namespace: &str, name: &str) -> bool {
        self.state()
            .leases
            .remove(&(namespace.to_owned(), name.to_owned()))
            .is_some()
    }

    /// Every request so far.
    #[must_use]
    pub fn requests(&self) -> Vec<Logged> {
        self.state().log.clone()
    }

    /// Delays every request of `client` by `latency` before it is served.
    pub fn latency(&self, client: &str, latency: Duration) {
        self.state()
            .faults
            .entry(client.to_owned())
            .or_default()
            .latency = latency;
    }

    /// Answers the next requests of `client` with `faults`, one each, in order.
    pub fn fail_next(&self, client: &str, faults: &[Fault]) {
        self.state()
            .faults
            .entry(client.to_owned())
            .or_default()
            .next
            .extend_from_slice(faults);
    }

    /// Cuts `client` off (its requests go unanswered, then their connections drop when it
    /// heals) or heals it.
    pub fn partition(&self, client: &str, partitioned: bool) {
        let mut s = self.state();
        let f = s.faults.entry(client.to_owned()).or_default();
        match (&f.partition, partitioned) {
            (None, true) => f.partition = Some(watch::Sender::new(true)),
            (Some(tx), false) => {
                tx.send_replace(false);
                f.partition = None;
            }
            _ => {}
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A dropped connection: the service's error makes hyper close it without an answer.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct Dropped;

type Answer = Result<Response<Full<Bytes>>, Dropped>;

/// An error answer, boxed to keep `Result`s small.
type Refusal = Box<Response<Full<Bytes>>>;

async fn serve(state: Arc<Mutex<State>>, client: String, req: Request<Incoming>) -> Answer {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let (latency, fault, partition) = {
        let mut s = lock(&state);
        let f = s.faults.entry(client.clone()).or_default();
        let fault = (!f.next.is_empty()).then(|| f.next.remove(0));
        (
            f.latency,
            fault,
            f.partition.as_ref().map(watch::Sender::subscribe),
        )
    };
    let log = |status: Option<u16>| {
        lock(&state).log.push(Logged {
            client: client.clone(),
            method: method.to_string(),
            path: path.clone(),
            status,
        });
    };
    if let Some(mut healed) = partition {
        let _ = healed.wait_for(|p| !*p).await;
        log(None);
        return Err(Dropped);
    }
    tokio::time::sleep(latency).await;
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            log(None);
            return Err(Dropped);
        }
    };
    let resp = match fault {
        Some(Fault::DropConnection) => {
            log(None);
            return Err(Dropped);
        }
        Some(Fault::InternalError) => status_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: injected fault",
            None,
        ),
        Some(Fault::TooManyRequests { retry_after_secs }) => {
            let mut r = status_response(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "too many requests, please try again later",
                None,
            );
            if let Ok(v) = retry_after_secs.to_string().parse() {
                r.headers_mut().insert("retry-after", v);
            }
            r
        }
        None => handle(&mut lock(&state), &method, &path, &body),
    };
    log(Some(resp.status().as_u16()));
    Ok(resp)
}

fn json_response(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = code;
    if let Ok(v) = "application/json".parse() {
        r.headers_mut().insert("content-type", v);
    }
    r
}

fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    json_response(code, &body)
}

fn lease_details(name: &str) -> Value {
    json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"})
}

fn not_found(name: &str) -> Response<Full<Bytes>> {
    status_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
        Some(lease_details(name)),
    )
}

fn bad_request(message: &str) -> Response<Full<Bytes>> {
    status_response(StatusCode::BAD_REQUEST, "BadRequest", message, None)
}

fn handle(s: &mut State, method: &Method, path: &str, body: &[u8]) -> Response<Full<Bytes>> {
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, [ns, "leases", name]) => {
            match s.leases.get(&((*ns).to_owned(), (*name).to_owned())) {
                Some(l) => json_response(StatusCode::OK, l),
                None => not_found(name),
            }
        }
        (&Method::DELETE, [ns, "leases", name]) => {
            match s.leases.remove(&((*ns).to_owned(), (*name).to_owned())) {
                Some(_) => json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success", "details": lease_details(name),
                    }),
                ),
                None => not_found(name),
            }
        }
        (&Method::POST, [ns, "leases"]) => match decode(body, ns, None, s.coordinated) {
            Err(r) => *r,
            Ok(lease) => create(s, ns, lease),
        },
        (&Method::PUT, [ns, "leases", name]) => match decode(body, ns, Some(name), s.coordinated) {
            Err(r) => *r,
            Ok(lease) => replace(s, ns, name, lease),
        },
        (_, [_, "leases"] | [_, "leases", _]) => status_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!("the server does not allow this method on the requested resource ({method})"),
            None,
        ),
        _ => status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ),
    }
}

fn create(s: &mut State, ns: &str, mut lease: Value) -> Response<Full<Bytes>> {
    let name = lease["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if let Err(r) = validate(&lease, &name) {
        return *r;
    }
    if s.leases.contains_key(&(ns.to_owned(), name.clone())) {
        return status_response(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            Some(lease_details(&name)),
        );
    }
    s.next_version += 1;
    s.next_uid += 1;
    let meta = &mut lease["metadata"];
    meta["resourceVersion"] = Value::String(s.next_version.to_string());
    meta["uid"] = Value::String(format!("00000000-0000-4000-8000-{:012x}", s.next_uid));
    meta["creationTimestamp"] = Value::String("2026-01-01T00:00:00Z".to_owned());
    s.leases.insert((ns.to_owned(), name), lease.clone());
    json_response(StatusCode::CREATED, &lease)
}

fn replace(s: &mut State, ns: &str, name: &str, mut lease: Value) -> Response<Full<Bytes>> {
    let key = (ns.to_owned(), name.to_owned());
    let sent_rv = lease["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let Some(current) = s.leases.get(&key).cloned() else {
        // Leases allow create on update, but only without a resourceVersion.
        return if sent_rv.is_some() {
            not_found(name)
        } else {
            create(s, ns, lease)
        };
    };
    let Some(sent_rv) = sent_rv else {
        return status_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!(
                "Lease.coordination.k8s.io \"{name}\" is invalid: metadata.resourceVersion: \
                 Invalid value: 0x0: must be specified for an update"
            ),
            Some(lease_details(name)),
        );
    };
    if current["metadata"]["resourceVersion"].as_str() != Some(sent_rv.as_str()) {
        return status_response(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the \
                 object has been modified; please apply your changes to the latest version and \
                 try again"
            ),
            Some(lease_details(name)),
        );
    }
    if let Err(r) = validate(&lease, name) {
        return *r;
    }
    // Server-owned fields stay as stored.
    for field in ["uid", "creationTimestamp"] {
        lease["metadata"][field] = current["metadata"][field].clone();
    }
    if lease != current {
        s.next_version += 1;
        lease["metadata"]["resourceVersion"] = Value::String(s.next_version.to_string());
    }
    s.leases.insert(key, lease.clone());
    json_response(StatusCode::OK, &lease)
}

/// Decodes a Lease as the API server's decoder would: 400 for what does not decode; unknown
/// fields dropped.
fn decode(
    body: &[u8],
    ns: &str,
    url_name: Option<&str>,
    coordinated: bool,
) -> Result<Value, Refusal> {
    let cannot = |why: &str| -> Refusal {
        Box::new(bad_request(&format!(
            "Lease in version \"v1\" cannot be handled as a Lease: {why}"
        )))
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| cannot(&e.to_string()))?;
    let Value::Object(obj) = v else {
        return Err(cannot("the body is not an object"));
    };
    let str_field = |o: &Map<String, Value>, k: &str| -> Result<Option<String>, Refusal> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(cannot(&format!("{k}: expected a string"))),
        }
    };
    let int_field = |o: &Map<String, Value>, k: &str| -> Result<Option<i64>, Refusal> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .filter(|n| i32::try_from(*n).is_ok())
                .map(Some)
                .ok_or_else(|| cannot(&format!("{k}: expected an int32"))),
            Some(_) => Err(cannot(&format!("{k}: expected a number"))),
        }
    };
    if let Some(kind) = str_field(&obj, "kind")?
        && kind != "Lease"
    {
        return Err(Box::new(bad_request(&format!(
            "Lease in version \"v1\" cannot be handled as a {kind}"
        ))));
    }
    let meta = match obj.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(cannot("metadata: expected an object")),
    };
    let mut out_meta = Map::new();
    for k in [
        "name",
        "namespace",
        "resourceVersion",
        "uid",
        "creationTimestamp",
    ] {
        if let Some(s) = str_field(&meta, k)? {
            out_meta.insert(k.to_owned(), Value::String(s));
        }
    }
    for k in ["labels", "annotations"] {
        match meta.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {
                out_meta.insert(k.to_owned(), Value::Object(m.clone()));
            }
            Some(_) => return Err(cannot(&format!("metadata.{k}: expected strings"))),
        }
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            out_meta.insert("ownerReferences".to_owned(), Value::Array(a.clone()));
        }
        Some(_) => return Err(cannot("metadata.ownerReferences: expected an array")),
    }
    match out_meta.get("namespace").and_then(Value::as_str) {
        None => {
            out_meta.insert("namespace".to_owned(), Value::String(ns.to_owned()));
        }
        Some(n) if n == ns => {}
        Some(_) => {
            return Err(Box::new(bad_request(
                "the namespace of the provided object does not match the namespace sent on the \
                 request",
            )));
        }
    }
    if let Some(url_name) = url_name {
        match out_meta.get("name").and_then(Value::as_str) {
            Some(n) if n == url_name => {}
            Some(n) => {
                return Err(Box::new(bad_request(&format!(
                    "the name of the object ({n}) does not match the name on the URL ({url_name})"
                ))));
            }
            None => {
                out_meta.insert("name".to_owned(), Value::String(url_name.to_owned()));
            }
        }
    }
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(cannot("spec: expected an object")),
    };
    let mut out_spec = Map::new();
    let mut strings = vec!["holderIdentity"];
    if coordinated {
        strings.extend(["strategy", "preferredHolder"]);
    }
    for k in strings {
        if let Some(s) = str_field(&spec, k)? {
            out_spec.insert(k.to_owned(), Value::String(s));
        }
    }
    for k in ["leaseDurationSeconds", "leaseTransitions"] {
        if let Some(n) = int_field(&spec, k)? {
            out_spec.insert(k.to_owned(), Value::from(n));
        }
    }
    for k in ["acquireTime", "renewTime"] {
        if let Some(t) = str_field(&spec, k)? {
            if !is_micro_time(&t) {
                return Err(cannot(&format!(
                    "parsing time \"{t}\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse"
                )));
            }
            out_spec.insert(k.to_owned(), Value::String(t));
        }
    }
    let mut out = Map::new();
    out.insert("kind".to_owned(), Value::String("Lease".to_owned()));
    out.insert(
        "apiVersion".to_owned(),
        Value::String("coordination.k8s.io/v1".to_owned()),
    );
    out.insert("metadata".to_owned(), Value::Object(out_meta));
    out.insert("spec".to_owned(), Value::Object(out_spec));
    Ok(Value::Object(out))
}

/// `MicroTime`'s wire format: RFC 3339 with exactly six fractional digits and a zone.
fn is_micro_time(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let head = digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26);
    let zone = &t.get(26..).unwrap_or("");
    head && (*zone == "Z"
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && zone.as_bytes()[3] == b':'
            && zone[1..3]
                .bytes()
                .chain(zone[4..].bytes())
                .all(|c| c.is_ascii_digit())))
}

/// Validation after decoding: 422 with the API server's field messages.
fn validate(lease: &Value, name: &str) -> Result<(), Refusal> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push((
            "metadata.name",
            "Required value: name or generateName is required".to_owned(),
        ));
    } else if !is_dns_subdomain(name) {
        causes.push((
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower \
                 case alphanumeric characters, '-' or '.', and must start and end with an \
                 alphanumeric character"
            ),
        ));
    }
    let spec = &lease["spec"];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        causes.push((
            "spec.leaseDurationSeconds",
            format!("Invalid value: {d}: must be greater than 0"),
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        causes.push((
            "spec.leaseTransitions",
            format!("Invalid value: {t}: must be greater than or equal to 0"),
        ));
    }
    if spec.get("preferredHolder").is_some() && spec.get("strategy").is_none() {
        causes.push((
            "spec.strategy",
            "Required value: must be specified when preferredHolder is set".to_owned(),
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    let message = format!(
        "Lease.coordination.k8s.io \"{name}\" is invalid: {}",
        causes
            .iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut details = lease_details(name);
    details["causes"] = causes
        .iter()
        .map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f}))
        .collect();
    Err(Box::new(status_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &message,
        Some(details),
    )))
}

fn is_dns_subdomain(name: &str) -> bool {
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = name.as_bytes();
    name.len() <= 253
        && b.first().copied().is_some_and(ok)
        && b.last().copied().is_some_and(ok)
        && b.iter().all(|&c| ok(c) || c == b'-' || c == b'.')
}
