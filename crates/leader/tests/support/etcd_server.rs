//! A throwaway etcd server for tests: Debian's `etcd` binary on 127.0.0.1, free ports, a
//! temporary data directory, killed and cleaned up on drop. Test support code, included with
//! `#[path]` by the tests that need it (it starts a process and panics, so it is no part of the
//! library).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running etcd started by a test.
///
#[derive(Debug)]
pub(crate) struct EtcdServer {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free local port")
}

impl EtcdServer {
    /// Starts etcd and waits until it answers a status request.
    ///
    /// # Panics
    ///
    /// Loudly, if etcd cannot be started or does not become ready within 10 s: a test that needs
    /// the server must fail rather than skip (`scripts/test` installs `etcd-server`).
    pub(crate) async fn start() -> Self {
        let (client, peer) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!("ctrlq-etcd-{}-{client}", std::process::id()));
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(&dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd must start: install etcd-server (scripts/test does)");
        let etcd = Self { child, dir, url };
        for _ in 0..100 {
            if let Ok(mut c) = etcd_client::Client::connect([etcd.url.as_str()], None).await
                && c.status().await.is_ok()
            {
                return etcd;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("etcd did not become ready at {}", etcd.url);
    }

    /// The client URL, `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Kills the server now (a crashed store); idempotent.
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the server: requests hang while it is frozen.
    pub(crate) fn freeze(&self, frozen: bool) {
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }
}
