//! Faults on a running [`ControlPlane`]: kube-apiserver frozen, killed, started again; a key
//! deleted from etcd past it; and its metrics, to count what a client asked of it.

use std::io::{Read, Write};
use std::time::Duration;

use crate::process::{self, signal};
use crate::{ADMIN, ControlPlane, keys};

impl ControlPlane {
    /// Stops kube-apiserver with SIGSTOP: its connections stay open and nothing answers, as a
    /// frozen or overloaded server. [`resume_apiserver`](Self::resume_apiserver) continues it.
    ///
    /// # Panics
    ///
    /// When `kill` cannot signal it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.pause_apiserver();
    /// // the leader's renewals time out; it must step down before its lease expires
    /// plane.resume_apiserver();
    /// # }
    /// ```
    pub fn pause_apiserver(&self) {
        signal(self.apiserver().lock().unwrap().id(), "STOP");
    }

    /// Continues kube-apiserver after [`pause_apiserver`](Self::pause_apiserver) (SIGCONT).
    ///
    /// # Panics
    ///
    /// When `kill` cannot signal it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.pause_apiserver();
    /// plane.resume_apiserver();
    /// # }
    /// ```
    pub fn resume_apiserver(&self) {
        signal(self.apiserver().lock().unwrap().id(), "CONT");
    }

    /// Kills kube-apiserver (SIGKILL: every connection drops at once) and leaves it down until
    /// [`start_apiserver`](Self::start_apiserver); etcd and its data stay.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.kill_apiserver();
    /// // every request fails to connect
    /// plane.start_apiserver().await;
    /// # }
    /// ```
    pub fn kill_apiserver(&self) {
        process::kill(&mut self.apiserver().lock().unwrap());
    }

    /// Starts kube-apiserver again after [`kill_apiserver`](Self::kill_apiserver), on the same
    /// port with the same certificate and identities, and waits until it is ready (at most
    /// [`START_TIMEOUT`](crate::START_TIMEOUT)).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start) does, when it cannot start.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.kill_apiserver();
    /// plane.start_apiserver().await;
    /// # }
    /// ```
    pub async fn start_apiserver(&self) {
        let started = process::spawn_apiserver(self.bin(), self.dir(), &self.apiserver_args())
            .and_then(|child| {
                let etcd = self.etcd().lock().unwrap().id();
                process::write_pids(self.dir(), &[child.id(), etcd])?;
                *self.apiserver().lock().unwrap() = child;
                Ok(())
            });
        let ready = match started {
            Ok(()) => self.wait_ready().await,
            Err(e) => Err(e),
        };
        ready.unwrap_or_else(|e| panic!("kube-apiserver did not start again: {e}"));
    }

    /// As [`start_apiserver`](Self::start_apiserver), with `flags` after kube-apiserver's own
    /// instead of the ones it was started with (and at its later starts): for example a feature
    /// gate turned off between two runs.
    ///
    /// # Panics
    ///
    /// As [`start_apiserver`](Self::start_apiserver).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start_with(["--feature-gates=ShardedListAndWatch=true"]).await;
    /// plane.kill_apiserver();
    /// plane.start_apiserver_with::<_, String>([]).await; // the gate off now
    /// # }
    /// ```
    pub async fn start_apiserver_with<I, S>(&self, flags: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.set_flags(flags.into_iter().map(Into::into).collect());
        self.start_apiserver().await;
    }

    /// Kills kube-apiserver and starts it again ([`kill_apiserver`](Self::kill_apiserver),
    /// [`start_apiserver`](Self::start_apiserver)): every watch and connection drops, and
    /// watchers list again.
    ///
    /// # Panics
    ///
    /// As [`start_apiserver`](Self::start_apiserver).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.restart_apiserver().await;
    /// # }
    /// ```
    pub async fn restart_apiserver(&self) {
        self.kill_apiserver();
        self.start_apiserver().await;
    }

    /// Deletes `key` from etcd itself, past kube-apiserver, through etcd's JSON gateway, and
    /// returns how many keys were deleted: for example `/registry/configmaps/<namespace>/<name>`
    /// while the API server is down, a change no watch sees as an event.
    ///
    /// # Panics
    ///
    /// When etcd does not answer within 10 s or refuses.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::start().await;
    /// plane.kill_apiserver();
    /// assert_eq!(plane.etcd_delete("/registry/configmaps/my-test/gone"), 1);
    /// plane.start_apiserver().await; // the watchers' relist finds it gone
    /// # }
    /// ```
    pub fn etcd_delete(&self, key: &str) -> u64 {
        let addr = self.etcd_addr();
        let body = format!(r#"{{"key":"{}"}}"#, keys::base64(key.as_bytes()));
        let timeout = Duration::from_secs(10);
        let socket = addr
            .parse()
            .expect("etcd's address is an IP address and port");
        let mut stream = std::net::TcpStream::connect_timeout(&socket, timeout)
            .unwrap_or_else(|e| panic!("etcd at {addr} does not answer: {e}"));
        stream
            .set_read_timeout(Some(timeout))
            .expect("a positive timeout");
        write!(
            stream,
            "POST /v3/kv/deleterange HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap_or_else(|e| panic!("the request to etcd at {addr}: {e}"));
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .unwrap_or_else(|e| panic!("etcd at {addr} does not answer: {e}"));
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "etcd refused: {response}"
        );
        // `{"header":{...},"deleted":"1"}`: etcd writes 64-bit integers as strings, and leaves
        // out zero values.
        response
            .split("\"deleted\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map_or(0, |n| n.parse().expect("etcd's count is a number"))
    }

    /// The sum of the API server's metric `name` (a counter, or a histogram's `_sum` or
    /// `_count`) over the series whose labels include every `label="value"` of `labels`, read
    /// from its `/metrics` as [`ADMIN`]. Counts since the API server last started.
    ///
    /// # Panics
    ///
    /// When the API server does not answer.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// let renewals = plane
    ///     .metric("apiserver_request_total", &["resource=\"leases\"", "verb=\"PUT\""])
    ///     .await;
    /// # }
    /// ```
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("a request without headers is valid");
        let text = self
            .client(ADMIN)
            .request_text(request)
            .await
            .unwrap_or_else(|e| panic!("the API server's metrics: {e}"));
        let prefix = format!("{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}
