//! A real Kubernetes control plane for tests, as controller-runtime's envtest starts one: etcd
//! and kube-apiserver (built by `scripts/install-controlplane` from the Go module in
//! `tools/controlplane`) on 127.0.0.1, free ports, a fresh temporary directory, killed and cleaned
//! up when dropped. Test support code, included with `#[path]` by the tests that need it (it starts
//! processes and panics, so it is no part of the library).
//!
//! - etcd: a fresh data directory, client and peer ports picked free, no fsync.
//! - kube-apiserver: its serving certificate self-signed into `--cert-dir` (read back as the
//!   clients' root), `--authorization-mode=RBAC`, identities from a static `--token-auth-file`
//!   ([`ADMIN`] in `system:masters`; the [`USERS`] with no rights beyond what every authenticated
//!   user has: a test grants them a Role), a service-account key made with `openssl genrsa`.
//! - [`ControlPlane::start`] waits (at most [`START_TIMEOUT`]) until `/readyz` answers `ok`, and
//!   panics loudly when it cannot start, with the logs' tails: a test that needs the server fails
//!   rather than skips.
//! - Dropping it kills both processes and removes the directory, also when a test panics. A
//!   watchdog process does the same within a second of the test process ending, so a control
//!   plane kept for a whole test binary ([`ControlPlane::shared`], in a static that is never
//!   dropped) or a test process killed outright leaves nothing behind.

#![allow(dead_code)] // each test binary uses its own part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The identity in `system:masters`: every request allowed.
pub(crate) const ADMIN: &str = "admin";
/// Identities with no rights of their own (only what `system:authenticated` has).
pub(crate) const USERS: [&str; 4] = ["alice", "bob", "carol", "dave"];
/// How long [`ControlPlane::start`] waits for `/readyz` (a cold start on two busy cores).
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running etcd and kube-apiserver started by a test.
#[derive(Debug)]
pub(crate) struct ControlPlane {
    etcd: std::sync::Mutex<Child>,
    /// Behind a lock so that a test sharing the control plane ([`Self::shared`]) can restart it.
    apiserver: std::sync::Mutex<Child>,
    apiserver_args: Vec<String>,
    watchdog: Child,
    dir: PathBuf,
    url: String,
    /// etcd's client address, `127.0.0.1:<port>`.
    etcd_addr: String,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The watchdog first, so it never signals a process id reused after ours exited.
        let apiserver = self.apiserver.get_mut().unwrap_or_else(|e| e.into_inner());
        let etcd = self.etcd.get_mut().unwrap_or_else(|e| e.into_inner());
        for child in [&mut self.watchdog, apiserver, etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

/// The token of `user` in the token file.
fn token(user: &str) -> String {
    format!("{user}-token")
}

/// The directory holding `kube-apiserver` and `etcd`: `$CTRLQ_CONTROLPLANE_BIN`, else
/// `$CTRLQ_CONTROLPLANE/<version>/bin` (default `~/.cache/ctrlq/controlplane`) with the version
/// read from `tools/controlplane/go.mod`, as `scripts/install-controlplane` builds it.
pub(crate) fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CTRLQ_CONTROLPLANE_BIN") {
        return dir.into();
    }
    // The workspace root is the nearest directory above the test's crate that has it.
    let go_mod = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("tools/controlplane/go.mod"))
        .find(|p| p.is_file())
        .expect("tools/controlplane/go.mod above the crate");
    let text = std::fs::read_to_string(&go_mod)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", go_mod.display()));
    let version = |module: &str| {
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.len() == 2 && w[0] == module && w[1].starts_with('v'))
            .map(|w| w[1].to_owned())
            .unwrap_or_else(|| panic!("{} requires no {module}", go_mod.display()))
    };
    let root = std::env::var_os("CTRLQ_CONTROLPLANE").map_or_else(
        || {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/ctrlq/controlplane")
        },
        PathBuf::from,
    );
    root.join(format!(
        "{}-etcd-{}",
        version("k8s.io/kubernetes"),
        version("go.etcd.io/etcd/server/v3")
    ))
    .join("bin")
}

/// Starts kube-apiserver with `args`, its log appended to `kube-apiserver.log` in `dir`.
fn spawn_apiserver(dir: &Path, args: &[String]) -> Child {
    let bin = bin_dir();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kube-apiserver.log"))
        .expect("the kube-apiserver log");
    Command::new(bin.join("kube-apiserver"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}/kube-apiserver must start: {e}", bin.display()))
}

/// Writes the process ids the watchdog kills.
fn write_pids(dir: &Path, pids: &[u32]) {
    let text: Vec<_> = pids.iter().map(u32::to_string).collect();
    std::fs::write(dir.join("pids"), text.join(" ")).expect("the pid file");
}

/// The last lines of a log file, for a failure message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Standard base64 with padding, as etcd's JSON gateway reads keys.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API server is ready.
    ///
    /// # Panics
    ///
    /// Loudly, when a binary is missing (run `scripts/install-deps`), a process exits, or
    /// `/readyz` does not answer `ok` within [`START_TIMEOUT`]; the message carries the tails of
    /// both logs.
    pub(crate) async fn start() -> Self {
        let bin = bin_dir();
        for name in ["etcd", "kube-apiserver"] {
            assert!(
                bin.join(name).is_file(),
                "{} is missing: run scripts/install-deps (it builds kube-apiserver and etcd \
                 from tools/controlplane with Go), or point CTRLQ_CONTROLPLANE_BIN at them",
                bin.join(name).display()
            );
        }
        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "ctrlq-controlplane-{}-{api_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("certs")).expect("a temporary directory");

        // Identities: "token,user,uid,groups".
        let mut tokens = format!("{},{ADMIN},{ADMIN},system:masters\n", token(ADMIN));
        for user in USERS {
            tokens.push_str(&format!("{},{user},{user}\n", token(user)));
        }
        std::fs::write(dir.join("tokens.csv"), tokens).expect("the token file");
        // Each identity's token in a file of its own, for the clients (`token_file`: kube-rs
        // reads it on requests, so it is written once, here, never while clients use it).
        for user in std::iter::once(ADMIN).chain(USERS) {
            std::fs::write(dir.join(format!("{user}.token")), token(user)).expect("a token file");
        }
        // The service-account token signing key (kube-apiserver refuses to start without one).
        let key = dir.join("sa.key");
        let openssl = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048")
            .stderr(Stdio::null())
            .status()
            .expect("openssl must run: install it (scripts/install-deps does)");
        assert!(openssl.success(), "openssl genrsa failed");

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Command::new(bin.join("etcd"))
            .args(["--name", "ctrlq", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &etcd_url])
            .args(["--advertise-client-urls", &etcd_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("ctrlq={peer_url}")])
            .args(["--unsafe-no-fsync", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log_file(&dir.join("etcd.log")))
            .spawn()
            .unwrap_or_else(|e| panic!("{}/etcd must start: {e}", bin.display()));
        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--cert-dir={}", dir.join("certs").display()),
            format!("--secure-port={api_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--authorization-mode=RBAC".into(),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            format!("--service-account-key-file={}", key.display()),
            format!("--service-account-signing-key-file={}", key.display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            // No Endpoints for the `kubernetes` Service (nothing routes to it here).
            "--endpoint-reconciler-type=none".into(),
            "--profiling=false".into(),
        ];
        let apiserver = spawn_apiserver(&dir, &apiserver_args);
        write_pids(&dir, &[apiserver.id(), etcd.id()]);
        // Kills both (by the process ids in `pids`, rewritten on a restart) and removes the
        // directory once this process is gone, however it ended.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(
                r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done
                   kill -CONT $(cat "$1/pids") 2>/dev/null
                   kill -9 $(cat "$1/pids") 2>/dev/null; sleep 1; rm -rf "$1""#,
            )
            .arg(std::process::id().to_string())
            .arg(&dir)
            .stdin(Stdio::null())
            .spawn()
            .expect("sh must start");
        let plane = Self {
            etcd: std::sync::Mutex::new(etcd),
            apiserver: std::sync::Mutex::new(apiserver),
            apiserver_args,
            watchdog,
            url: format!("https://127.0.0.1:{api_port}"),
            etcd_addr: format!("127.0.0.1:{etcd_port}"),
            dir,
        };
        plane.wait_ready().await;
        plane
    }

    /// A control plane shared by the tests of one test binary: started by the first test that
    /// asks, stopped by the watchdog when the binary exits (a static is never dropped). Each
    /// test still makes its own clients ([`Self::client`]): a kube-rs client lives on the
    /// runtime of the test that made it.
    pub(crate) async fn shared() -> &'static Self {
        static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
        SHARED.get_or_init(Self::start).await
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        loop {
            let apiserver = self.apiserver.lock().unwrap().try_wait().ok().flatten();
            let etcd = self.etcd.lock().unwrap().try_wait().ok().flatten();
            let exited = [("etcd", etcd)]
                .into_iter()
                .chain([("kube-apiserver", apiserver)])
                .find_map(|(name, status)| Some((name, status?)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}) while starting\n{}", self.logs());
            }
            // The serving certificate exists once kube-apiserver has written it.
            if self.dir.join("certs/apiserver.crt").is_file() {
                let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
                match self.client(ADMIN).request_text(request).await {
                    Ok(body) if body == "ok" => return,
                    Ok(body) => last = body,
                    Err(e) => last = e.to_string(),
                }
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver was not ready at {} within {START_TIMEOUT:?} (last answer: \
                 {last})\n{}",
                self.url,
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Stops kube-apiserver with SIGSTOP: its connections stay open and nothing answers, as a
    /// frozen or overloaded server. [`Self::resume_apiserver`] continues it.
    pub(crate) fn pause_apiserver(&self) {
        self.signal_apiserver("STOP");
    }

    /// Continues kube-apiserver after [`Self::pause_apiserver`] (SIGCONT).
    pub(crate) fn resume_apiserver(&self) {
        self.signal_apiserver("CONT");
    }

    fn signal_apiserver(&self, signal: &str) {
        let pid = self.apiserver.lock().unwrap().id();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("kill must run");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Kills kube-apiserver (SIGKILL: every connection drops at once) and leaves it down until
    /// [`Self::start_apiserver`]; etcd and its data stay.
    pub(crate) fn kill_apiserver(&self) {
        let mut child = self.apiserver.lock().unwrap();
        let _ = Command::new("kill")
            .args(["-CONT", &child.id().to_string()])
            .status();
        child.kill().expect("kube-apiserver must be killable");
        child.wait().expect("kube-apiserver must be reaped");
    }

    /// Starts kube-apiserver again after [`Self::kill_apiserver`], on the same port with the
    /// same certificate and identities, and waits until it is ready.
    ///
    /// # Panics
    ///
    /// As [`Self::start`] does when it cannot start.
    pub(crate) async fn start_apiserver(&self) {
        let child = spawn_apiserver(&self.dir, &self.apiserver_args);
        write_pids(&self.dir, &[child.id(), self.etcd.lock().unwrap().id()]);
        *self.apiserver.lock().unwrap() = child;
        self.wait_ready().await;
    }

    /// Deletes `key` from etcd itself, past kube-apiserver (for example
    /// `/registry/configmaps/<namespace>/<name>` while it is down: a change no watch sees as an
    /// event), through etcd's JSON gateway; returns how many keys were deleted.
    pub(crate) fn etcd_delete(&self, key: &str) -> u64 {
        use std::io::{Read, Write};
        let body = format!(r#"{{"key":"{}"}}"#, base64(key.as_bytes()));
        let mut stream = std::net::TcpStream::connect(&self.etcd_addr).expect("etcd answers");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "POST /v3/kv/deleterange HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.etcd_addr,
            body.len()
        )
        .expect("the request is sent");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("etcd answers");
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
            .map_or(0, |n| n.parse().expect("a count"))
    }

    /// Kills kube-apiserver and starts it again ([`Self::kill_apiserver`],
    /// [`Self::start_apiserver`]).
    pub(crate) async fn restart_apiserver(&self) {
        self.kill_apiserver();
        self.start_apiserver().await;
    }

    /// The sum of the API server's metric `name` (a counter, or a histogram's `_sum` or
    /// `_count`) over the series whose labels include every `label="value"` pair of `labels`
    /// (e.g. `["resource=\"leases\"", "verb=\"PUT\""]`), read from its `/metrics` as
    /// `admin`. Counts since the API server last started.
    pub(crate) async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self
            .client(ADMIN)
            .request_text(request)
            .await
            .expect("the API server's metrics");
        let prefix = format!("{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn logs(&self) -> String {
        format!(
            "--- etcd.log (tail) ---\n{}\n--- kube-apiserver.log (tail) ---\n{}",
            tail(&self.dir.join("etcd.log")),
            tail(&self.dir.join("kube-apiserver.log"))
        )
    }

    /// The temporary directory: etcd's data, the certificates, the token files, both logs.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The PEM file of the API server's self-signed serving certificate and its CA.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.join("certs/apiserver.crt")
    }

    /// A kube-rs configuration for `user` ([`ADMIN`] or one of the [`USERS`]): its bearer token,
    /// the serving certificate as the only root.
    ///
    /// # Panics
    ///
    /// When `user` is not in the token file.
    pub(crate) fn config(&self, user: &str) -> kube::Config {
        assert!(
            user == ADMIN || USERS.contains(&user),
            "{user} is not an identity of the control plane"
        );
        let mut config = kube::Config::new(self.url.parse().expect("a URL"));
        config.root_cert_file = Some(self.ca_file());
        let token_file = self.dir.join(format!("{user}.token"));
        config.auth_info.token_file = Some(token_file.display().to_string());
        config.default_namespace = "default".into();
        config
    }

    /// A kube-rs client for `user` on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// When `user` is not in the token file or the client cannot be built.
    pub(crate) fn client(&self, user: &str) -> kube::Client {
        kube::Client::try_from(self.config(user)).expect("a kube client")
    }
}

/// Creates the namespace `name` as `admin` (each test takes its own, so tests sharing one
/// control plane never see each other's Leases).
///
/// # Panics
///
/// When the API server refuses.
pub(crate) async fn create_namespace(admin: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    kube::Api::<Namespace>::all(admin.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

/// Grants `user` the `verbs` on Leases in `namespace` (a Role and its RoleBinding, created as
/// `admin`), then waits until the API server's authorizer allows each of them (its RBAC cache
/// follows the objects shortly after they are written), at most 30 s.
///
/// # Panics
///
/// When the API server refuses, or does not allow the verbs within 30 s.
pub(crate) async fn grant_leases(
    admin: &kube::Client,
    namespace: &str,
    user: &str,
    verbs: &[&str],
) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    let name = format!("leases-{user}");
    let meta = kube::api::ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name,
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.into(),
            ..Default::default()
        }]),
    };
    let pp = kube::api::PostParams::default();
    kube::Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&pp, &role)
        .await
        .unwrap_or_else(|e| panic!("Role for {user}: {e}"));
    kube::Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&pp, &binding)
        .await
        .unwrap_or_else(|e| panic!("RoleBinding for {user}: {e}"));
    let reviews = kube::Api::<SubjectAccessReview>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    for verb in verbs {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("coordination.k8s.io".into()),
                    resource: Some("leases".into()),
                    namespace: Some(namespace.into()),
                    verb: Some((*verb).to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        loop {
            let answer = reviews
                .create(&pp, &review)
                .await
                .unwrap_or_else(|e| panic!("SubjectAccessReview: {e}"));
            if answer.status.is_some_and(|s| s.allowed) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{user} not allowed to {verb} leases in {namespace} 30 s after the grant"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
