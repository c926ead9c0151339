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
//!   `Invalid` if the Lease exists; a `PUT` of a missing Lease creates it (201), whatever
//!   `resourceVersion` it carries, unless it carries a `uid` (a replace of a deleted Lease as
//!   last read), which answers 409 `Conflict` as kube-apiserver's uid precondition does; a
//!   `POST` of an existing name answers 409
//!   `AlreadyExists`; a missing name answers 404 `NotFound`; every error with a `Status` body
//!   worded as the API server words it;
//! - a body that cannot be decoded (not a Lease object, wrong JSON types, a `MicroTime`
//!   without exactly six fractional digits, a name or namespace that differs from the URL's)
//!   answers 400 `BadRequest`; one that decodes but is invalid (`leaseDurationSeconds` ≤ 0,
//!   `leaseTransitions` < 0, `preferredHolder` without `strategy`, a bad name) answers 422
//!   `Invalid`;
//! - unknown fields are dropped, with a `Warning: 299` header for top-level and `spec` ones;
//!   `spec.strategy` and `spec.preferredHolder` are kept (the `CoordinatedLeaderElection`
//!   feature on) unless [`LeaseServer::coordinated`] turns it off.
//!
//! Each candidate talks to the server through its own listener ([`LeaseServer::client`]), so
//! faults apply per candidate: latency, 500s, 429s with `Retry-After`, dropped connections, a
//! partition (requests go unanswered until it heals, then the connection drops). A third party
//! can rewrite or delete the Lease ([`LeaseServer::modify`], [`LeaseServer::delete`]).
//!
//! What it does not do: authentication, watches, lists, patches, field selectors, dry runs,
//! managed fields, and the `Warning` header for dropped `metadata` fields.
//!
//! # Examples
//!
//! ```
//! use ctrlq_leader::lease_emulation::LeaseServer;
//! use ctrlq_leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let server = LeaseServer::start();
//! let lock = LeaseLock::new(server.client("a").await.unwrap(), "default", "demo", "a");
//! let elector = LeaderElector::new(lock, LeaderElectionConfig::default()).unwrap();
//! elector.run(CancellationToken::new(), |_| async {}).await;
//! let lease = server.lease("default", "demo").unwrap();
//! assert_eq!(lease["spec"]["holderIdentity"], "a");
//! # }
//! ```

mod api;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use api::{handle, status_response};

/// The running emulation; stops serving when dropped.
///
/// # Examples
///
/// ```
/// let server = ctrlq_leader::lease_emulation::LeaseServer::start();
/// assert!(server.lease("default", "x").is_none());
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
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// The `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
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
    /// An empty server. It listens nowhere until a client asks: each
    /// [`client`](Self::client) (or [`endpoint`](Self::endpoint)) gets a listener of its own.
    #[must_use]
    pub fn start() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                leases: HashMap::new(),
                next_version: 1000,
                next_uid: 0,
                coordinated: true,
                faults: HashMap::new(),
                log: Vec::new(),
            })),
            stop: CancellationToken::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// A dropped connection: the service's error makes hyper close it without an answer.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct Dropped;

type Answer = Result<Response<Full<Bytes>>, Dropped>;

async fn serve(state: Arc<Mutex<State>>, client: String, req: Request<Incoming>) -> Answer {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let user_agent = req
        .headers()
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let field_manager = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("fieldManager="))
            .map(str::to_owned)
    });
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
            user_agent: user_agent.clone(),
            field_manager: field_manager.clone(),
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
        None => handle(&mut lock(&state), &method, &path, &query, &body),
    };
    log(Some(resp.status().as_u16()));
    Ok(resp)
}
