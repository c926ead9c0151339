//! What the benches that run replica processes on a real control plane share (`shardwatch`,
//! `shardrun`): the client from a kubeconfig, the ConfigMaps they watch, a process's memory, and
//! a replica process of the same binary that reports in JSON lines.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;

/// A client from the control plane's kubeconfig file, as a replica process builds it.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("a config from the kubeconfig");
    kube::Client::try_from(config).expect("a kube client")
}

/// Creates the namespaces `namespaces`, then `configmaps` ConfigMaps `cm-000000`… with
/// `data.value` "0", ConfigMap `i` in namespace `namespace_of(i)`, 32 at a time.
pub async fn create_config_maps(
    client: &kube::Client,
    namespaces: impl IntoIterator<Item = String>,
    configmaps: usize,
    namespace_of: impl Fn(usize) -> String,
) {
    for name in namespaces {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("a namespace");
    }
    futures::stream::iter(0..configmaps)
        .map(|i| {
            let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace_of(i));
            async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("cm-{i:06}")),
                        ..Default::default()
                    },
                    data: Some([("value".to_owned(), "0".to_owned())].into()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm)
                    .await
                    .expect("a ConfigMap");
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
}

/// A field of this process's `/proc/self/status` in KiB: `VmHWM:` (the peak resident set),
/// `VmRSS:` (the resident set now); 0 where it cannot be read.
pub fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A replica: this binary run again with `args`, its stdout read as JSON lines on a thread,
/// its stdin open until the bench closes it.
#[derive(Debug)]
pub struct ReplicaProcess {
    /// The process.
    pub child: Child,
    /// Its stdin: the bench writes requests to it, or drops it to ask for the report.
    pub stdin: Option<ChildStdin>,
    /// The JSON lines it printed, in order.
    pub lines: Receiver<Value>,
}

impl ReplicaProcess {
    /// Starts this binary with `args`.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Self {
        Self::spawn_program(std::env::current_exe().expect("this binary"), args)
    }

    /// Starts `program` with `args`.
    pub fn spawn_program<S: AsRef<std::ffi::OsStr>>(
        program: impl AsRef<std::ffi::OsStr>,
        args: impl IntoIterator<Item = S>,
    ) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("a replica process");
        let stdout = child.stdout.take().expect("its stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }

    /// Its next line that has `key`, within `limit`.
    ///
    /// # Panics
    ///
    /// When no such line comes in time (the bench fails rather than waits).
    pub fn next_with(&self, key: &str, limit: Duration) -> Value {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .expect("a replica line in time");
            if v.get(key).is_some() {
                return v;
            }
        }
    }
}

/// A bench's result lines: each printed, appended to the `--out` file when there is one, and
/// kept for the table at the end.
#[derive(Debug, Default)]
pub struct ResultLines {
    out: Option<std::fs::File>,
    /// The lines so far.
    pub lines: Vec<Value>,
}

impl ResultLines {
    /// Lines appended to `out` (created if missing) as well as printed.
    ///
    /// # Panics
    ///
    /// When `out` cannot be opened for appending.
    pub fn new(out: Option<&str>) -> Self {
        let out = out.map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| panic!("--out {p}: {e}"))
        });
        Self {
            out,
            lines: Vec::new(),
        }
    }

    /// Prints `line`, appends it to the file, keeps it.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn push(&mut self, line: Value) {
        use std::io::Write;
        println!("{line}");
        if let Some(out) = &mut self.out {
            writeln!(out, "{line}").expect("the --out file");
        }
        self.lines.push(line);
    }
}
