//! [`ControlPlane`]: etcd and kube-apiserver started for a test, and its identities.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::process::{self, kill};
use crate::{Error, find_binaries, keys, kubeconfig};

/// The identity in `system:masters`: every request allowed.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane};
///
/// # async fn test() {
/// let plane = ControlPlane::shared().await;
/// let admin: kube::Client = plane.client(ADMIN);
/// # }
/// ```
pub const ADMIN: &str = "admin";

/// Identities with no rights of their own (only what every authenticated user has): a test
/// grants them what it means to allow, with [`grant`](crate::grant).
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane, USERS, create_namespace, grant_leases};
///
/// # async fn test() {
/// let plane = ControlPlane::shared().await;
/// let admin = plane.client(ADMIN);
/// create_namespace(&admin, "rights").await;
/// let [alice, ..] = USERS;
/// grant_leases(&admin, "rights", alice, &["get", "update"]).await;
/// let alice = plane.client(alice); // allowed those two verbs on Leases there, nothing else
/// # }
/// ```
pub const USERS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// How long [`ControlPlane::start`] waits for the API server to be ready (a cold start on two
/// busy cores takes well under it).
///
/// # Examples
///
/// ```
/// assert!(ctrlq_envtest::START_TIMEOUT.as_secs() >= 60);
/// ```
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running etcd and kube-apiserver, as controller-runtime's envtest starts them.
///
/// - etcd with a fresh data directory, no fsync; kube-apiserver on a free 127.0.0.1 port with
///   its serving certificate self-signed (the clients' only root), `--authorization-mode=RBAC`,
///   the identities [`ADMIN`] and [`USERS`] from a static token file, and a service-account key
///   generated in process.
/// - A kubeconfig for `kubectl` ([`kubeconfig_file`](Self::kubeconfig_file)) and kube-rs
///   clients for each identity ([`client`](Self::client)).
/// - Faults on demand: [`pause_apiserver`](Self::pause_apiserver) (SIGSTOP),
///   [`kill_apiserver`](Self::kill_apiserver), [`start_apiserver`](Self::start_apiserver)
///   (or [`start_apiserver_with`](Self::start_apiserver_with) other flags),
///   [`restart_apiserver`](Self::restart_apiserver), and
///   [`etcd_delete`](Self::etcd_delete) past the API server.
/// - Dropping it kills both processes and removes its directory, also when the test panics.
///   A watchdog process does the same within about two seconds of the test process ending, so
///   [`shared`](Self::shared)'s control plane (in a static, never dropped) or a test binary
///   killed outright leaves nothing behind.
///
/// Its waits are in real time (the server's clock cannot be paused): start it on a runtime
/// whose time is not paused.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// #[tokio::test]
/// async fn my_controller_should_reconcile_a_config_map() {
///     let plane = ControlPlane::shared().await;
///     let admin = plane.client(ADMIN);
///     create_namespace(&admin, "my-test").await;
///     let config_maps = kube::Api::<ConfigMap>::namespaced(admin, "my-test");
///     // start the controller on `plane.client(...)`, create objects, await its effects
/// #   let _ = config_maps;
/// }
/// ```
pub struct ControlPlane {
    etcd: Mutex<Child>,
    /// Behind a lock so that a test sharing the control plane ([`Self::shared`]) can restart it.
    apiserver: Mutex<Child>,
    /// kube-apiserver's own arguments.
    apiserver_args: Vec<String>,
    /// The flags passed after them: the start's, or the last restart's.
    flags: Mutex<Vec<String>>,
    bin: PathBuf,
    watchdog: Child,
    dir: PathBuf,
    url: String,
    /// etcd's client address, `127.0.0.1:<port>`.
    etcd_addr: String,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, and waits until the API server is ready (at most
    /// [`START_TIMEOUT`]).
    ///
    /// The binaries come from [`find_binaries`].
    ///
    /// # Panics
    ///
    /// Loudly, with [`Error`]'s message, whenever [`try_start`](Self::try_start) fails: a test
    /// that needs the server fails rather than skips.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::ControlPlane;
    ///
    /// # async fn test() {
    /// let plane = ControlPlane::start().await; // this test's own, stopped when dropped
    /// plane.restart_apiserver().await;
    /// # }
    /// ```
    pub async fn start() -> Self {
        Self::try_start()
            .await
            .unwrap_or_else(|e| panic!("the control plane did not start: {e}"))
    }

    /// Starts etcd and kube-apiserver, and waits until the API server is ready (at most
    /// [`START_TIMEOUT`]); as [`start`](Self::start), with the failure returned.
    ///
    /// # Errors
    ///
    /// [`Error::BinariesNotFound`] when [`find_binaries`] finds none; [`Error::Exited`] or
    /// [`Error::NotReady`], with the tails of both logs, when a process exits or the API
    /// server is not ready in time; [`Error::Io`] or [`Error::Key`] when its files cannot be
    /// written. Nothing is left running or on disk.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::ControlPlane;
    ///
    /// # async fn test() -> Result<(), ctrlq_envtest::Error> {
    /// let plane = ControlPlane::try_start().await?;
    /// println!("kubectl --kubeconfig {}", plane.kubeconfig_file().display());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_start() -> Result<Self, Error> {
        Self::try_start_with(Vec::<String>::new()).await
    }

    /// As [`start`](Self::start), with `flags` passed to kube-apiserver after its own (so a
    /// flag given here wins), and again at each [restart](Self::restart_apiserver): a feature
    /// gate, an admission plugin, a runtime config.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::ControlPlane;
    ///
    /// # async fn test() {
    /// let plane = ControlPlane::start_with(["--feature-gates=ShardedListAndWatch=true"]).await;
    /// # let _ = plane;
    /// # }
    /// ```
    pub async fn start_with<I, S>(flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::try_start_with(flags)
            .await
            .unwrap_or_else(|e| panic!("the control plane did not start: {e}"))
    }

    /// As [`try_start`](Self::try_start), with `flags` passed to kube-apiserver after its own
    /// ([`start_with`](Self::start_with)).
    ///
    /// # Errors
    ///
    /// As [`try_start`](Self::try_start); a flag kube-apiserver refuses makes it exit:
    /// [`Error::Exited`], with its log's tail.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::ControlPlane;
    ///
    /// # async fn test() -> Result<(), ctrlq_envtest::Error> {
    /// let plane = ControlPlane::try_start_with(["--feature-gates=ShardedListAndWatch=true"]).await?;
    /// # let _ = plane;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_start_with<I, S>(flags: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let flags: Vec<String> = flags.into_iter().map(Into::into).collect();
        let bin = find_binaries()?;
        let (etcd_port, peer_port, api_port) = (
            process::free_port()?,
            process::free_port()?,
            process::free_port()?,
        );
        let dir =
            std::env::temp_dir().join(format!("ctrlq-envtest-{}-{api_port}", std::process::id()));
        let url = format!("https://127.0.0.1:{api_port}");
        let spawned = write_files(&dir, &url).and_then(|()| {
            Self::spawn(
                bin,
                dir.clone(),
                url,
                [etcd_port, peer_port, api_port],
                flags,
            )
        });
        let plane = spawned.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        plane.wait_ready().await?; // on failure, dropping the plane stops it
        Ok(plane)
    }

    /// Starts the processes on the files [`write_files`] wrote.
    fn spawn(
        bin: PathBuf,
        dir: PathBuf,
        url: String,
        [etcd_port, peer_port, api_port]: [u16; 3],
        flags: Vec<String>,
    ) -> Result<Self, Error> {
        let apiserver_args = apiserver_args(&dir, etcd_port, api_port);
        let all: Vec<String> = apiserver_args.iter().chain(&flags).cloned().collect();
        let mut etcd = process::spawn_etcd(&bin, &dir, etcd_port, peer_port)?;
        let mut apiserver = match process::spawn_apiserver(&bin, &dir, &all) {
            Ok(child) => child,
            Err(e) => {
                kill(&mut etcd);
                return Err(e);
            }
        };
        let watchdog = process::write_pids(&dir, &[apiserver.id(), etcd.id()])
            .and_then(|()| process::spawn_watchdog(&dir));
        let watchdog = match watchdog {
            Ok(child) => child,
            Err(e) => {
                kill(&mut apiserver);
                kill(&mut etcd);
                return Err(e);
            }
        };
        Ok(Self {
            etcd: Mutex::new(etcd),
            apiserver: Mutex::new(apiserver),
            apiserver_args,
            flags: Mutex::new(flags),
            bin,
            watchdog,
            dir,
            url,
            etcd_addr: format!("127.0.0.1:{etcd_port}"),
        })
    }

    /// The control plane shared by the tests of one test binary: started by the first test
    /// that asks, stopped by the watchdog when the binary exits (a static is never dropped).
    ///
    /// Each test still makes its own clients ([`Self::client`]), since a kube-rs client lives on
    /// the runtime of the test that made it, and works in a namespace of its own
    /// ([`create_namespace`](crate::create_namespace)) so that tests stay apart.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start); each test asking after a failed start tries again, and fails
    /// as loudly.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::{ADMIN, ControlPlane};
    ///
    /// # async fn test() {
    /// let plane: &'static ControlPlane = ControlPlane::shared().await;
    /// let admin = plane.client(ADMIN);
    /// # }
    /// ```
    pub async fn shared() -> &'static Self {
        static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
        SHARED.get_or_init(Self::start).await
    }

    /// Waits until `/readyz` answers `ok`, at most [`START_TIMEOUT`].
    pub(crate) async fn wait_ready(&self) -> Result<(), Error> {
        // NOTE: real time, not tokio's: the deadline is the server's, which no paused clock stops.
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::from("none");
        loop {
            if let Some((process, status)) = self.exited() {
                let logs = process::logs(&self.dir);
                return Err(Error::Exited {
                    process,
                    status,
                    logs,
                });
            }
            // The serving certificate exists once kube-apiserver has written it.
            if self.ca_file().is_file() {
                match self.readyz().await {
                    Ok(body) if body == "ok" => return Ok(()),
                    Ok(body) => last = body,
                    Err(e) => last = e,
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    url: self.url.clone(),
                    timeout: START_TIMEOUT,
                    last,
                    logs: process::logs(&self.dir),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The first of etcd and kube-apiserver found to have exited, and how.
    fn exited(&self) -> Option<(&'static str, ExitStatus)> {
        let etcd = self.etcd.lock().unwrap().try_wait().ok().flatten();
        let apiserver = self.apiserver.lock().unwrap().try_wait().ok().flatten();
        [("etcd", etcd), ("kube-apiserver", apiserver)]
            .into_iter()
            .find_map(|(name, status)| Some((name, status?)))
    }

    /// `/readyz`'s answer, or why there was none.
    async fn readyz(&self) -> Result<String, String> {
        let mut config = self.config(ADMIN);
        config.read_timeout = Some(Duration::from_secs(5));
        config.connect_timeout = Some(Duration::from_secs(5));
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a request without headers is valid");
        client
            .request_text(request)
            .await
            .map_err(|e| e.to_string())
    }

    pub(crate) fn bin(&self) -> &Path {
        &self.bin
    }

    /// kube-apiserver's arguments: its own, then the flags.
    pub(crate) fn apiserver_args(&self) -> Vec<String> {
        let flags = self
            .flags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.apiserver_args.iter().chain(&*flags).cloned().collect()
    }

    /// Sets the flags passed to kube-apiserver after its own, from its next start on.
    pub(crate) fn set_flags(&self, flags: Vec<String>) {
        *self
            .flags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = flags;
    }

    pub(crate) fn apiserver(&self) -> &Mutex<Child> {
        &self.apiserver
    }

    pub(crate) fn etcd(&self) -> &Mutex<Child> {
        &self.etcd
    }

    pub(crate) fn etcd_addr(&self) -> &str {
        &self.etcd_addr
    }

    /// The control plane's temporary directory: etcd's data, the certificates, the token files,
    /// the kubeconfig and both logs (`etcd.log`, `kube-apiserver.log`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// let log = std::fs::read_to_string(plane.dir().join("kube-apiserver.log")).unwrap();
    /// # }
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// assert!(plane.url().starts_with("https://127.0.0.1:"));
    /// # }
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The PEM file of the API server's self-signed serving certificate and its CA: the only
    /// root a client of it needs.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// let pem = std::fs::read(plane.ca_file()).unwrap();
    /// # }
    /// ```
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("certs/apiserver.crt")
    }

    /// The file holding `user`'s bearer token ([`ADMIN`] or one of the [`USERS`]), for a
    /// client that is not kube-rs (another process, a Go program).
    ///
    /// # Panics
    ///
    /// When `user` is not an identity of the control plane.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// let replica = std::process::Command::new("my-controller")
    ///     .arg("--server").arg(plane.url())
    ///     .arg("--token-file").arg(plane.token_file("alice"))
    ///     .arg("--ca-file").arg(plane.ca_file())
    ///     .spawn();
    /// # }
    /// ```
    pub fn token_file(&self, user: &str) -> PathBuf {
        assert_identity(user);
        self.dir.join(format!("{user}.token"))
    }

    /// The kubeconfig for `kubectl` and other clients: one context per identity, named after
    /// it ([`ADMIN`] current, the [`USERS`] beside it), namespace `default`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// // kubectl --kubeconfig <file> --context alice auth can-i list leases
    /// let path = plane.kubeconfig_file();
    /// let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    /// # }
    /// ```
    pub fn kubeconfig_file(&self) -> PathBuf {
        self.dir.join(kubeconfig::FILE)
    }

    /// A kube-rs configuration for `user` ([`ADMIN`] or one of the [`USERS`]): its bearer
    /// token, the serving certificate as the only root, namespace `default`.
    ///
    /// # Panics
    ///
    /// When `user` is not an identity of the control plane.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn test() {
    /// let plane = ctrlq_envtest::ControlPlane::shared().await;
    /// let mut config = plane.config("bob");
    /// config.read_timeout = Some(Duration::from_secs(1));
    /// let bob = kube::Client::try_from(config).unwrap();
    /// # }
    /// ```
    pub fn config(&self, user: &str) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().expect("the URL is valid"));
        config.root_cert_file = Some(self.ca_file());
        let token_file = self.token_file(user);
        config.auth_info.token_file = Some(token_file.display().to_string());
        config.default_namespace = "default".into();
        config
    }

    /// A kube-rs client for `user` ([`ADMIN`] or one of the [`USERS`]) on the current tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// When `user` is not an identity of the control plane, or outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ctrlq_envtest::{ADMIN, ControlPlane};
    /// use k8s_openapi::api::core::v1::Namespace;
    ///
    /// # async fn test() {
    /// let plane = ControlPlane::shared().await;
    /// let namespaces = kube::Api::<Namespace>::all(plane.client(ADMIN));
    /// let list = namespaces.list(&Default::default()).await.unwrap();
    /// # }
    /// ```
    pub fn client(&self, user: &str) -> kube::Client {
        kube::Client::try_from(self.config(user)).expect("a kube client for the control plane")
    }
}

/// The files kube-apiserver reads and clients use: the token file and each identity's token,
/// the service-account key, the kubeconfig.
fn write_files(dir: &Path, url: &str) -> Result<(), Error> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(Error::io(format!("{}", dir.join(name).display())))
    };
    std::fs::create_dir_all(dir.join("certs")).map_err(Error::io(format!("{}", dir.display())))?;
    // "token,user,uid,groups"
    let mut tokens = format!("{},{ADMIN},{ADMIN},system:masters\n", token(ADMIN));
    for user in USERS {
        tokens.push_str(&format!("{},{user},{user}\n", token(user)));
    }
    write("tokens.csv", &tokens)?;
    // Each identity's token in a file of its own, for the clients (kube-rs reads `token_file` on
    // requests, so it is written once, here, never while clients use it).
    for user in std::iter::once(ADMIN).chain(USERS) {
        write(&format!("{user}.token"), &token(user))?;
    }
    let (private, public) = keys::service_account_key()?;
    write("sa.key", &private)?;
    write("sa.pub", &public)?;
    let identities: Vec<_> = std::iter::once(ADMIN)
        .chain(USERS)
        .map(|u| (u, token(u)))
        .collect();
    let ca = dir.join("certs/apiserver.crt");
    write(kubeconfig::FILE, &kubeconfig::render(url, &ca, &identities))
}

fn apiserver_args(dir: &Path, etcd_port: u16, api_port: u16) -> Vec<String> {
    let (private, public) = (dir.join("sa.key"), dir.join("sa.pub"));
    vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        format!("--cert-dir={}", dir.join("certs").display()),
        format!("--secure-port={api_port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        "--authorization-mode=RBAC".into(),
        format!("--token-auth-file={}", dir.join("tokens.csv").display()),
        format!("--service-account-key-file={}", public.display()),
        format!("--service-account-signing-key-file={}", private.display()),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        // No Endpoints for the `kubernetes` Service (nothing routes to it here).
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
    ]
}

/// The bearer token of `user` in the token file.
fn token(user: &str) -> String {
    format!("{user}-token")
}

fn assert_identity(user: &str) {
    assert!(
        user == ADMIN || USERS.contains(&user),
        "{user} is not an identity of the control plane (ADMIN or one of USERS)"
    );
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("etcd", &self.etcd_addr)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The watchdog first, so that it never signals a process id reused after ours exited.
        kill(&mut self.watchdog);
        let apiserver = self.apiserver.get_mut().unwrap_or_else(|e| e.into_inner());
        // A paused kube-apiserver dies of SIGKILL too.
        kill(apiserver);
        kill(self.etcd.get_mut().unwrap_or_else(|e| e.into_inner()));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
