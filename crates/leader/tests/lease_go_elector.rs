//! The crate's `LeaseLock` electors and client-go's own elector (`tools/goelector`: client-go's
//! `leaderelection.RunOrDie` with a `resourcelock.LeaseLock`, built here with `go build`)
//! contending for one Lease on a real kube-apiserver (`ctrlq-envtest`), with kills
//! and graceful hand-overs both ways. Every leader term is logged with its wall-clock start and
//! end, by each side for itself: the Rust electors' leadership events, the Go processes' own
//! output lines. From both logs together: no two terms overlap, and each term's fencing token
//! (the Lease's `leaseTransitions`) is one more than the previous term's, whichever language
//! held either.
//!
//! A Rust term ends at its `Stopped` event (sent before a release). A Go term ends at its
//! `stopped` line (client-go's `OnStoppedLeading`), at its kill, or, on SIGTERM, at its
//! `stopping` line: the program prints it right before cancelling the context the leading work
//! runs under, and client-go releases the Lease only after that, but calls `OnStoppedLeading`
//! only after the release, when a candidate may already have taken the Lease.
//!
//! Go is needed (`$GO`, `go` on the `PATH`, or `/usr/local/go/bin/go`), and the module cache
//! must hold `tools/goelector`'s modules or the Go module proxy be reachable; the test fails,
//! never skips, when the program cannot be built or started. Real time: every wait is bounded.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace, grant_leases};
use ctrlq_leader::{
    ElectorStatus, LeaderElectionConfig, LeaderElector, LeadershipEnd, LeadershipEvent, LeaseLock,
};
use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

const NS: &str = "go-elector";
const NAME: &str = "shared";
/// The same timing on both sides. Short, for a quick test, yet within both electors' rules:
/// client-go's (lease duration > renew deadline > 1.2 × retry period) and this crate's (also
/// lease duration > renew deadline + retry period, whole seconds), with the margin a mixed
/// election needs when the retry period is under a second (lease duration − renew deadline −
/// retry period ≥ retry period; see `LeaderElector`).
const LEASE_DURATION: Duration = Duration::from_secs(5);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// How long a leader keeps the Lease in the scenario's steps 3 and 4 while a candidate of the
/// other language follows it: two lease durations of renews, which keep the follower out.
const HOLD: Duration = Duration::from_secs(10);
/// The bound of every wait.
const WAIT: Duration = Duration::from_secs(60);
/// The identity the Go processes authenticate as, and the Rust electors' (each allowed only
/// what an elector needs on Leases in the test's namespace).
const GO_USER: &str = "alice";
const RUST_USER: &str = "bob";

/// Wall-clock nanoseconds since the Unix epoch (what the Go program prints).
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos()
}

/// The Go toolchain: `$GO`, else `go` on the `PATH`, else `/usr/local/go/bin/go` (as
/// `scripts/install-controlplane` looks for it).
fn go_command() -> PathBuf {
    if let Some(go) = std::env::var_os("GO") {
        return go.into();
    }
    let on_path = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        return "go".into();
    }
    let fallback = Path::new("/usr/local/go/bin/go");
    assert!(
        fallback.is_file(),
        "no Go toolchain ('go' is not on PATH, $GO is unset, /usr/local/go/bin/go is missing): \
         this test builds tools/goelector with it; install Go (scripts/install-deps needs it too)"
    );
    fallback.into()
}

/// Builds `tools/goelector` once per test binary, into the target directory, and returns the
/// binary. Built at each run rather than cached by version: it is always the program as
/// checked out, and with Go's build cache warm (`scripts/install-deps` builds it) it is only a
/// link.
fn goelector() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/goelector");
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("goelector/goelector");
        let go = go_command();
        let started = std::time::Instant::now();
        let output = Command::new(&go)
            .args([
                "build",
                "-mod=readonly",
                "-trimpath",
                "-buildvcs=false",
                "-o",
            ])
            .arg(&bin)
            .arg(".")
            .current_dir(&src)
            .env("CGO_ENABLED", "0")
            .output()
            .unwrap_or_else(|e| panic!("{} must run: {e}", go.display()));
        assert!(
            output.status.success(),
            "go build of {} failed ({}); it needs the modules of its go.sum in the Go module \
             cache or the module proxy (scripts/install-deps fetches them):\n{}",
            src.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "built {} in {:.1} s",
            bin.display(),
            started.elapsed().as_secs_f64()
        );
        bin
    })
}

/// One line of a Go process's output.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GoEvent {
    /// `leader`: the holder it observes changed.
    Leader(String),
    /// `started`: it leads, with the Lease's `leaseTransitions`.
    Started(u64),
    /// `stopping`: it got SIGTERM; its leading context is cancelled right after.
    Stopping,
    /// `stopped`: client-go's `OnStoppedLeading` (also called when it never led).
    Stopped,
}

fn parse_go_line(line: &str) -> (u128, GoEvent) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| {
        w.parse::<u128>()
            .unwrap_or_else(|_| panic!("goelector printed a bad time: {line:?}"))
    };
    match words.as_slice() {
        ["leader", t, holder] => (at(t), GoEvent::Leader((*holder).to_owned())),
        ["started", t, n] => (
            at(t),
            GoEvent::Started(
                n.parse()
                    .unwrap_or_else(|_| panic!("bad transitions: {line:?}")),
            ),
        ),
        ["stopping", t] => (at(t), GoEvent::Stopping),
        ["stopped", t] => (at(t), GoEvent::Stopped),
        _ => panic!("goelector printed an unknown line: {line:?}"),
    }
}

/// A Go elector process, killed when dropped. Its stdout is read line by line as it comes;
/// its stderr (client-go's log) goes to a file, shown when a wait fails.
struct GoElector {
    identity: String,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: PathBuf,
    /// When it was killed with SIGKILL (taken after it was reaped).
    killed_at: Option<u128>,
}

impl Drop for GoElector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GoElector {
    fn start(plane: &ControlPlane, identity: &str) -> Self {
        let stderr = plane.dir().join(format!("{identity}.log"));
        let mut child = Command::new(goelector())
            .args(["-server", plane.url()])
            .arg("-token-file")
            .arg(plane.token_file(GO_USER))
            .arg("-ca-file")
            .arg(plane.ca_file())
            .args(["-namespace", NS, "-name", NAME, "-identity", identity])
            .arg(format!("-lease-duration={}ms", LEASE_DURATION.as_millis()))
            .arg(format!("-renew-deadline={}ms", RENEW_DEADLINE.as_millis()))
            .arg(format!("-retry-period={}ms", RETRY_PERIOD.as_millis()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::File::create(&stderr)
                    .unwrap_or_else(|e| panic!("{}: {e}", stderr.display())),
            )
            .spawn()
            .unwrap_or_else(|e| panic!("{} must start: {e}", goelector().display()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (stdout, sink) = (child.stdout.take().expect("piped"), lines.clone());
        // Ends at EOF, when the process exits.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            identity: identity.to_owned(),
            child,
            lines,
            stderr,
            killed_at: None,
        }
    }

    fn events(&self) -> Vec<(u128, GoEvent)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| parse_go_line(l))
            .collect()
    }

    fn describe(&self) -> String {
        let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        format!(
            "{}: stdout {:?}\n--- stderr (tail) ---\n{}",
            self.identity,
            self.lines.lock().unwrap(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    }

    /// Waits (at most [`WAIT`]) until its output has an event matching `f`.
    async fn wait_for(&mut self, what: &str, f: impl Fn(&GoEvent) -> bool) -> (u128, GoEvent) {
        let found = timeout(WAIT, async {
            loop {
                if let Some(e) = self.events().into_iter().find(|(_, e)| f(e)) {
                    return Some(e);
                }
                if let Ok(Some(status)) = self.child.try_wait() {
                    // Exited: its last lines may still be on their way.
                    sleep(Duration::from_millis(200)).await;
                    return self
                        .events()
                        .into_iter()
                        .find(|(_, e)| f(e))
                        .or_else(|| panic!("{} exited ({status})", self.describe()));
                }
                sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        match found {
            Ok(Some(e)) => e,
            _ => panic!("{what} within {WAIT:?}\n{}", self.describe()),
        }
    }

    async fn wait_started(&mut self) -> u64 {
        let what = format!("{} leading", self.identity);
        match self
            .wait_for(&what, |e| matches!(e, GoEvent::Started(_)))
            .await
        {
            (_, GoEvent::Started(n)) => n,
            _ => unreachable!(),
        }
    }

    async fn wait_following(&mut self, holder: &str) {
        let what = format!("{} following {holder}", self.identity);
        self.wait_for(&what, |e| *e == GoEvent::Leader(holder.to_owned()))
            .await;
    }

    fn has_led(&self) -> bool {
        self.events()
            .iter()
            .any(|(_, e)| matches!(e, GoEvent::Started(_)))
    }

    fn has_stopped(&self) -> bool {
        self.events()
            .iter()
            .any(|(_, e)| matches!(e, GoEvent::Stopping | GoEvent::Stopped))
    }

    /// SIGKILL: it stops at once, releasing nothing.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
        self.killed_at = Some(now_ns());
    }

    /// SIGTERM, then waits (at most [`WAIT`]) until it exits, with status 0: client-go cancels
    /// its leading context, releases the Lease, calls `OnStoppedLeading`, and `RunOrDie`
    /// returns.
    async fn terminate(&mut self) {
        let status = Command::new("sh")
            .args(["-c", "kill -TERM \"$0\""])
            .arg(self.child.id().to_string())
            .status()
            .expect("sh must run");
        assert!(status.success(), "kill -TERM {}", self.child.id());
        let exited = timeout(WAIT, async {
            loop {
                if let Some(status) = self.child.try_wait().expect("try_wait") {
                    return status;
                }
                sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("exit after SIGTERM within {WAIT:?}\n{}", self.describe()));
        assert!(exited.success(), "{exited}\n{}", self.describe());
        // The reader thread has the last lines once it reads EOF; they were written before the
        // exit, so they come at once.
        let what = format!("{} stopped", self.identity);
        self.wait_for(&what, |e| *e == GoEvent::Stopped).await;
    }

    /// Its terms, from its own output: each starts at a `started` line and ends at the first
    /// `stopping` or `stopped` line after it, or when it was killed.
    fn terms(&self) -> Vec<Term> {
        let mut terms = Vec::new();
        let mut open: Option<Term> = None;
        for (at, event) in self.events() {
            match event {
                GoEvent::Started(token) => {
                    assert!(open.is_none(), "started twice\n{}", self.describe());
                    open = Some(Term {
                        who: self.identity.clone(),
                        start: at,
                        end: None,
                        token,
                        graceful: false,
                    });
                }
                GoEvent::Stopping | GoEvent::Stopped => {
                    if let Some(mut term) = open.take() {
                        term.end = Some(at);
                        term.graceful = event == GoEvent::Stopping;
                        terms.push(term);
                    }
                }
                GoEvent::Leader(_) => {}
            }
        }
        if let Some(mut term) = open {
            term.end = self.killed_at;
            terms.push(term);
        }
        terms
    }
}

/// One leader term, as the side that held it logged it (wall-clock nanoseconds).
#[derive(Debug, Clone)]
struct Term {
    who: String,
    start: u128,
    /// `None`: still open when the logs were read.
    end: Option<u128>,
    token: u64,
    /// Ended by a stop request, releasing the Lease (not a kill or a loss).
    graceful: bool,
}

/// A Rust candidate: a `LeaderElector<LeaseLock>` run on its own task, its leadership events
/// logged with their wall-clock times as they come.
struct RustCandidate {
    identity: String,
    elector: Arc<LeaderElector<LeaseLock>>,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<Option<()>>>,
    events: Arc<Mutex<Vec<(u128, LeadershipEvent)>>>,
}

impl Drop for RustCandidate {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl RustCandidate {
    fn start(plane: &ControlPlane, identity: &str) -> Self {
        let lock = LeaseLock::new(plane.client(RUST_USER), NS, NAME, identity)
            .request_timeout(Duration::from_secs(2));
        let config = LeaderElectionConfig::default()
            .lease_duration(LEASE_DURATION)
            .renew_deadline(RENEW_DEADLINE)
            .retry_period(RETRY_PERIOD)
            .release_on_cancel(true);
        let elector = Arc::new(LeaderElector::new(lock, config).expect("a valid configuration"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut stream = elector.subscribe_leadership();
        let sink = events.clone();
        // Ends when the elector is dropped. Each event's tokio instant is turned into wall-clock
        // time by its distance from now.
        tokio::spawn(async move {
            while let Some(event) = stream.recv().await {
                let at = match event {
                    LeadershipEvent::Started { at, .. } | LeadershipEvent::Stopped { at, .. } => at,
                    _ => unreachable!("no other transition"),
                };
                let ago = Instant::now().saturating_duration_since(at).as_nanos();
                sink.lock().unwrap().push((now_ns() - ago, event));
            }
        });
        let cancel = CancellationToken::new();
        let (e, c) = (elector.clone(), cancel.clone());
        let task = tokio::spawn(async move {
            e.run(c, |leadership| async move {
                leadership.token().cancelled().await;
            })
            .await
        });
        Self {
            identity: identity.to_owned(),
            elector,
            cancel,
            task: Some(task),
            events,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}: {:?}\nevents {:?}",
            self.identity,
            self.elector.subscribe_status().borrow(),
            self.events.lock().unwrap()
        )
    }

    /// Waits (at most [`WAIT`]) until its status satisfies `f`.
    async fn wait_status(&self, what: &str, f: impl Fn(&ElectorStatus) -> bool) -> ElectorStatus {
        let mut status = self.elector.subscribe_status();
        timeout(WAIT, async {
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
        .unwrap_or_else(|_| panic!("{what} within {WAIT:?}\n{}", self.describe()))
    }

    async fn wait_leading(&self) -> u64 {
        let what = format!("{} leading", self.identity);
        let status = self.wait_status(&what, |s| s.leading).await;
        status.fencing_token.expect("a leader has a fencing token")
    }

    async fn wait_following(&self, holder: &str) {
        let what = format!("{} following {holder}", self.identity);
        self.wait_status(&what, |s| !s.leading && s.leader == holder)
            .await;
    }

    /// Cancels the run: the work stops, the elector stops leading, releases the Lease (it is
    /// configured to) and returns; waits (at most [`WAIT`]) for that.
    async fn stop(&mut self) {
        self.cancel.cancel();
        let task = self.task.take().expect("running");
        timeout(WAIT, task)
            .await
            .unwrap_or_else(|_| panic!("the run's end within {WAIT:?}\n{}", self.describe()))
            .expect("the run does not panic");
    }

    /// Aborts the run's task, as a crash would end it: the lease is neither renewed nor
    /// released, and expires.
    async fn kill(&mut self) {
        let task = self.task.take().expect("running");
        task.abort();
        let ended = timeout(WAIT, task).await.expect("an aborted task ends");
        assert!(ended.unwrap_err().is_cancelled());
    }

    /// Its terms, from its leadership events: each starts at `Started`, ends at `Stopped`.
    fn terms(&self) -> Vec<Term> {
        let mut terms: Vec<Term> = Vec::new();
        for (at, event) in self.events.lock().unwrap().iter() {
            match *event {
                LeadershipEvent::Started { fencing_token, .. } => terms.push(Term {
                    who: self.identity.clone(),
                    start: *at,
                    end: None,
                    token: fencing_token,
                    graceful: false,
                }),
                LeadershipEvent::Stopped {
                    fencing_token,
                    reason,
                    ..
                } => {
                    let term = terms
                        .last_mut()
                        .filter(|t| t.end.is_none())
                        .unwrap_or_else(|| panic!("Stopped with no term\n{}", self.describe()));
                    assert_eq!(term.token, fencing_token, "{}", self.describe());
                    term.end = Some(*at);
                    term.graceful = reason == LeadershipEnd::StopRequested;
                }
                _ => unreachable!("no other transition"),
            }
        }
        terms
    }
}

async fn lease(admin: &kube::Client) -> Lease {
    kube::Api::<Lease>::namespaced(admin.clone(), NS)
        .get(NAME)
        .await
        .unwrap_or_else(|e| panic!("Lease {NS}/{NAME}: {e}"))
}

/// Checks the terms of all candidates together: in the order they started, each started after
/// the previous one ended (and none is open), and its fencing token is the previous one's plus
/// one (an acquire adds one to `leaseTransitions`, a renew or a release keeps it). The gaps: after
/// a term that ended gracefully (the Lease released) the next began within the lease duration,
/// the released Lease taken at once; after a kill, not before half a lease duration, the Lease
/// left to expire (a follower counts the lease duration from the last change it saw, which is at
/// most a retry period before the kill, or a second and a retry period for client-go, which
/// compares records at whole seconds). Returns the terms in order.
fn check_terms(mut terms: Vec<Term>) -> Vec<Term> {
    terms.sort_by_key(|t| t.start);
    let dump = || {
        let base = terms.first().map_or(0, |t| t.start);
        let ms = |ns: u128| format!("{:.3}", (ns - base) as f64 / 1e6);
        terms
            .iter()
            .map(|t| {
                format!(
                    "{:>8} token {} from {} ms to {} ms{}",
                    t.who,
                    t.token,
                    ms(t.start),
                    t.end.map_or_else(|| "(open)".into(), ms),
                    if t.graceful { " (released)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (i, term) in terms.iter().enumerate() {
        assert!(term.end.is_some(), "a term still open:\n{}", dump());
        if i == 0 {
            continue;
        }
        let prev = &terms[i - 1];
        let prev_end = prev.end.expect("checked");
        assert!(
            prev_end <= term.start,
            "two leaders at once: {} started before {} stopped\n{}",
            term.who,
            prev.who,
            dump()
        );
        assert_eq!(
            term.token,
            prev.token + 1,
            "fencing tokens must rise by one per term\n{}",
            dump()
        );
        let gap = term.start - prev_end;
        if prev.graceful {
            assert!(
                gap < LEASE_DURATION.as_nanos(),
                "a released Lease taken only after its lease duration\n{}",
                dump()
            );
        } else {
            assert!(
                gap >= LEASE_DURATION.as_nanos() / 2,
                "a killed leader's Lease taken before it expired\n{}",
                dump()
            );
        }
    }
    eprintln!("terms:\n{}", dump());
    terms
}

/// The scenario, on one Lease, each hand-over to the only candidate waiting for it:
///
/// 1. go-1 (alone) creates the Lease and leads; rust-1 follows it.
/// 2. go-1 is killed (SIGKILL): rust-1 leads once the lease has expired.
/// 3. go-2 follows rust-1, which keeps leading for [`HOLD`]; then rust-1 is cancelled and
///    releases: go-2 leads at once.
/// 4. rust-2 follows go-2, which keeps leading for [`HOLD`]; then go-2 gets SIGTERM and
///    releases: rust-2 leads at once.
/// 5. go-3 follows rust-2; rust-2's run is aborted (a crash): go-3 leads once the lease expires.
/// 6. rust-3 and go-4 both follow go-3; go-3 gets SIGTERM: one of them leads, the other then
///    follows it; the leader stops gracefully, the other leads, and stops gracefully too.
///
/// Then the checks of [`check_terms`] on both sides' logs together, the expected leaders in
/// order, and the Lease left released with the last term's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_go_electors_should_share_one_lease() {
    // Built before the control plane starts, so a build failure is the first thing reported.
    goelector();
    let plane = ControlPlane::shared().await;
    let admin = plane.client(ADMIN);
    create_namespace(&admin, NS).await;
    // What client-go's election needs on Leases, and the same for the Rust side.
    for user in [GO_USER, RUST_USER] {
        grant_leases(&admin, NS, user, &["get", "create", "update"]).await;
    }

    // 1.
    let mut go1 = GoElector::start(plane, "go-1");
    assert_eq!(go1.wait_started().await, 0, "go-1 created the Lease");
    let mut rust1 = RustCandidate::start(plane, "rust-1");
    rust1.wait_following("go-1").await;

    // 2.
    go1.kill();
    rust1.wait_leading().await;

    // 3.
    let mut go2 = GoElector::start(plane, "go-2");
    go2.wait_following("rust-1").await;
    sleep(HOLD).await;
    assert!(rust1.elector.is_leader(), "{}", rust1.describe());
    assert!(!go2.has_led(), "{}", go2.describe());
    rust1.stop().await;
    go2.wait_started().await;

    // 4.
    let mut rust2 = RustCandidate::start(plane, "rust-2");
    rust2.wait_following("go-2").await;
    sleep(HOLD).await;
    assert!(!go2.has_stopped(), "{}", go2.describe());
    assert!(
        rust2.events.lock().unwrap().is_empty(),
        "{}",
        rust2.describe()
    );
    go2.terminate().await;
    rust2.wait_leading().await;

    // 5.
    let mut go3 = GoElector::start(plane, "go-3");
    go3.wait_following("rust-2").await;
    rust2.kill().await;
    go3.wait_started().await;

    // 6.
    let mut rust3 = RustCandidate::start(plane, "rust-3");
    let mut go4 = GoElector::start(plane, "go-4");
    rust3.wait_following("go-3").await;
    go4.wait_following("go-3").await;
    go3.terminate().await;
    let leader = timeout(WAIT, async {
        loop {
            if rust3.elector.is_leader() {
                return "rust-3";
            }
            if go4.has_led() {
                return "go-4";
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "rust-3 or go-4 leading within {WAIT:?}\n{}\n{}",
            rust3.describe(),
            go4.describe()
        )
    });
    if leader == "rust-3" {
        go4.wait_following("rust-3").await;
        rust3.stop().await;
        go4.wait_started().await;
        go4.terminate().await;
    } else {
        rust3.wait_following("go-4").await;
        go4.terminate().await;
        rust3.wait_leading().await;
        rust3.stop().await;
    }

    let terms: Vec<Term> = [&go1, &go2, &go3, &go4]
        .iter()
        .flat_map(|g| g.terms())
        .chain([&rust1, &rust2, &rust3].iter().flat_map(|r| r.terms()))
        .collect();
    let terms = check_terms(terms);
    let leaders: Vec<&str> = terms.iter().map(|t| t.who.as_str()).collect();
    let last = if leader == "rust-3" { "go-4" } else { "rust-3" };
    assert_eq!(
        leaders,
        ["go-1", "rust-1", "go-2", "rust-2", "go-3", leader, last]
    );
    assert_eq!(terms[0].token, 0);
    // Gracefully ended: every term but the killed ones (go-1's, rust-2's).
    let released: Vec<bool> = terms.iter().map(|t| t.graceful).collect();
    assert_eq!(released, [false, true, true, false, true, true, true]);
    let spec = lease(&admin).await.spec.expect("a spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(""), "released");
    assert_eq!(spec.lease_transitions, Some(6));
}
