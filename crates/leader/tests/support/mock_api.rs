//! A scripted Kubernetes API for the Lease lock's tests of what a real kube-apiserver will not
//! do on demand: a chosen status code (500, 429), a dropped connection, a request that never
//! answers (under paused time). A `kube::Client` over a `tower` service, as kube-rs tests its
//! own client: each request is recorded, then answered by the next scripted [`Answer`].

#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// How the mock answers one request.
#[derive(Clone, Debug)]
pub(crate) enum Answer {
    /// This status code with this JSON body.
    Json(u16, Value),
    /// A `Status` failure with this code and reason.
    Failure(u16, &'static str),
    /// The connection drops: a transport error, no status.
    Drop,
    /// Never answers.
    Hang,
}

/// A request the mock saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) user_agent: Option<String>,
    pub(crate) field_manager: Option<String>,
    pub(crate) body: Option<Value>,
}

/// The scripted answers and the requests seen.
#[derive(Clone, Default)]
pub(crate) struct MockApi {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl MockApi {
    /// Queues `answer` for the next request not yet answered.
    pub(crate) fn answer(&self, answer: Answer) {
        self.answers.lock().unwrap().push_back(answer);
    }

    /// Every request seen so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// A client whose requests this mock answers (a request with no answer queued panics).
    pub(crate) fn client(&self) -> kube::Client {
        let mock = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let mock = mock.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = body.collect_bytes().await.expect("a request body");
                let header = |name: &str| {
                    let v = parts.headers.get(name)?;
                    Some(String::from_utf8_lossy(v.as_bytes()).into_owned())
                };
                let field_manager = parts.uri.query().and_then(|q| {
                    q.split('&')
                        .find_map(|kv| kv.strip_prefix("fieldManager="))
                        .map(str::to_owned)
                });
                mock.seen.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_owned(),
                    user_agent: header("user-agent"),
                    field_manager,
                    body: serde_json::from_slice(&bytes).ok(),
                });
                let answer = mock.answers.lock().unwrap().pop_front();
                let (code, body) = match answer.expect("a scripted answer for every request") {
                    Answer::Json(code, body) => (code, body),
                    Answer::Failure(code, reason) => (
                        code,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "message": reason, "reason": reason, "code": code}),
                    ),
                    Answer::Drop => {
                        return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
                    }
                    Answer::Hang => std::future::pending().await,
                };
                let response = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
                    .expect("a response");
                Ok(response)
            }
        });
        kube::Client::new(service, "default")
    }
}

/// A Lease as the API server returns it, with `spec` and a resource version.
pub(crate) fn lease(spec: Value, resource_version: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "demo", "namespace": "default", "resourceVersion": resource_version,
                     "uid": "8d5c3e2a-0000-4000-8000-000000000001"},
        "spec": spec,
    })
}
