//! The processes: etcd, kube-apiserver and the watchdog that stops both when the test process
//! is gone, and their logs.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::Error;

/// A free TCP port on 127.0.0.1 (the listener is closed again, so another process could take
/// it before ours binds; a clash makes the start fail with the process's log).
pub(crate) fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(Error::io("a free port on 127.0.0.1"))
}

/// etcd on `client_port` (and `peer_port`) with a fresh data directory in `dir`, no fsync.
pub(crate) fn spawn_etcd(
    bin: &Path,
    dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> Result<Child, Error> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let log = File::create(dir.join("etcd.log")).map_err(Error::io("etcd.log"))?;
    Command::new(bin.join("etcd"))
        .args(["--name", "envtest", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &client])
        .args(["--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("envtest={peer}")])
        .args(["--unsafe-no-fsync", "--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(Error::io(format!("{}/etcd", bin.display())))
}

/// kube-apiserver with `args`, its log appended to `kube-apiserver.log` in `dir` (a restart
/// keeps the earlier runs' lines).
pub(crate) fn spawn_apiserver(bin: &Path, dir: &Path, args: &[String]) -> Result<Child, Error> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kube-apiserver.log"))
        .map_err(Error::io("kube-apiserver.log"))?;
    Command::new(bin.join("kube-apiserver"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(Error::io(format!("{}/kube-apiserver", bin.display())))
}

/// Writes the process ids the watchdog stops.
pub(crate) fn write_pids(dir: &Path, pids: &[u32]) -> Result<(), Error> {
    let text: Vec<_> = pids.iter().map(u32::to_string).collect();
    std::fs::write(dir.join("pids"), text.join(" ")).map_err(Error::io("the pid file"))
}

/// A shell that waits for this process to end, however it ends (a static never dropped, a
/// test binary killed), then kills the processes named in `dir/pids` (continuing a paused
/// one first) and removes `dir`: within about two seconds, nothing is left behind.
pub(crate) fn spawn_watchdog(dir: &Path) -> Result<Child, Error> {
    Command::new("sh")
        .arg("-c")
        .arg(
            r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done
               kill -CONT $(cat "$1/pids") 2>/dev/null
               kill -9 $(cat "$1/pids") 2>/dev/null; sleep 1; rm -rf "$1""#,
        )
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("the watchdog (sh)"))
}

/// Sends `signal` (`STOP`, `CONT`, ...) to `pid` with `kill`.
///
/// # Panics
///
/// When `kill` cannot run or fails.
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill must run");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Kills `child` and reaps it; a process already gone is fine.
pub(crate) fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The tails of both logs in `dir`, for a failure message.
pub(crate) fn logs(dir: &Path) -> String {
    format!(
        "--- etcd.log (tail) ---\n{}\n--- kube-apiserver.log (tail) ---\n{}",
        tail(&dir.join("etcd.log")),
        tail(&dir.join("kube-apiserver.log"))
    )
}

/// The last 30 lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<_> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
