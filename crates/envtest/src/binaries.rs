//! Where `etcd` and `kube-apiserver` are found.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::Error;

/// The control plane version `scripts/install-controlplane` of this ctrlq release builds, as
/// the name of its directory in the installer's cache: `<Kubernetes version>-etcd-<etcd
/// version>` (the versions its `tools/controlplane/go.mod` requires).
///
/// # Examples
///
/// ```
/// assert!(ctrlq_envtest::CONTROL_PLANE_VERSION.starts_with("v1."));
/// ```
pub const CONTROL_PLANE_VERSION: &str = "v1.37.2-etcd-v3.7.0";

/// The directory holding `etcd` and `kube-apiserver` side by side: the first of these that has
/// both.
///
/// 1. `$KUBEBUILDER_ASSETS`, as controller-runtime's envtest reads it: the directory
///    `setup-envtest use -p path <version>` prints.
/// 2. `$CTRLQ_CONTROLPLANE_BIN`: any directory you filled yourself.
/// 3. The cache of ctrlq's installer, `$CTRLQ_CONTROLPLANE/`[`CONTROL_PLANE_VERSION`]`/bin`
///    (by default under `~/.cache/ctrlq/controlplane`), where `scripts/install-controlplane`
///    builds both with Go.
///
/// A place that is set but lacks a binary is passed over, and named in the error.
///
/// # Errors
///
/// [`Error::BinariesNotFound`] when none of the three has both, naming each with what it
/// lacked.
///
/// # Examples
///
/// ```no_run
/// let bin = ctrlq_envtest::find_binaries()?;
/// assert!(bin.join("kube-apiserver").is_file());
/// # Ok::<(), ctrlq_envtest::Error>(())
/// ```
pub fn find_binaries() -> Result<PathBuf, Error> {
    search(|name| std::env::var_os(name))
}

const NAMES: [&str; 2] = ["etcd", "kube-apiserver"];

/// [`find_binaries`] over an environment of `env`'s.
fn search(env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, Error> {
    let mut tried = Vec::new();
    let variables = [
        (
            "KUBEBUILDER_ASSETS",
            "the directory `setup-envtest use -p path <version>` prints",
        ),
        (
            "CTRLQ_CONTROLPLANE_BIN",
            "a directory with `etcd` and `kube-apiserver` side by side",
        ),
    ];
    for (variable, what) in variables {
        match env(variable) {
            None => tried.push(format!("${variable} is not set (set it to {what})")),
            Some(dir) => {
                let dir = PathBuf::from(dir);
                match lacking(&dir) {
                    None => return Ok(dir),
                    Some(lacks) => tried.push(format!("${variable} = {}: {lacks}", dir.display())),
                }
            }
        }
    }
    let root = env("CTRLQ_CONTROLPLANE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| Path::new(&home).join(".cache/ctrlq/controlplane")));
    match root {
        None => tried.push(
            "the cache of ctrlq's installer: neither $CTRLQ_CONTROLPLANE nor $HOME is set".into(),
        ),
        Some(root) => {
            let dir = root.join(CONTROL_PLANE_VERSION).join("bin");
            match lacking(&dir) {
                None => return Ok(dir),
                Some(lacks) => tried.push(format!(
                    "{}: {lacks} (ctrlq's scripts/install-controlplane builds both there with Go)",
                    dir.display()
                )),
            }
        }
    }
    Err(Error::BinariesNotFound { tried })
}

/// What `dir` lacks of the two binaries, if anything.
fn lacking(dir: &Path) -> Option<String> {
    let missing: Vec<_> = NAMES.iter().filter(|n| !dir.join(n).is_file()).collect();
    match missing.as_slice() {
        [] => None,
        [one] => Some(format!("no {one}")),
        _ => Some("no etcd, no kube-apiserver".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A directory under the system's temporary one holding `names`, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn with(tag: &str, names: &[&str]) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "ctrlq-envtest-binaries-{}-{tag}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            for name in names {
                std::fs::write(dir.join(name), "").unwrap();
            }
            Self(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn env(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn kubebuilder_assets_should_come_first() {
        let assets = Dir::with("assets", &NAMES);
        let bin = Dir::with("bin", &NAMES);
        let env = env(&[
            ("KUBEBUILDER_ASSETS", &assets.0),
            ("CTRLQ_CONTROLPLANE_BIN", &bin.0),
        ]);
        assert_eq!(search(env).unwrap(), assets.0);
    }

    #[test]
    fn a_place_lacking_a_binary_should_be_passed_over() {
        let assets = Dir::with("half", &["etcd"]);
        let bin = Dir::with("whole", &NAMES);
        let env = env(&[
            ("KUBEBUILDER_ASSETS", &assets.0),
            ("CTRLQ_CONTROLPLANE_BIN", &bin.0),
        ]);
        assert_eq!(search(env).unwrap(), bin.0);
    }

    #[test]
    fn the_installer_cache_should_be_the_versioned_directory_under_its_root() {
        let root = Dir::with("root", &[]);
        let bin = root.0.join(CONTROL_PLANE_VERSION).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for name in NAMES {
            std::fs::write(bin.join(name), "").unwrap();
        }
        assert_eq!(
            search(env(&[("CTRLQ_CONTROLPLANE", &root.0)])).unwrap(),
            bin
        );
    }

    #[test]
    fn the_error_should_name_all_three_places_and_what_each_lacked() {
        let home = Dir::with("home", &[]);
        let assets = Dir::with("kube-only", &["kube-apiserver"]);
        let env = env(&[("KUBEBUILDER_ASSETS", &assets.0), ("HOME", &home.0)]);
        let message = search(env).unwrap_err().to_string();
        assert!(message.contains("1. $KUBEBUILDER_ASSETS = "), "{message}");
        assert!(message.contains("kube-only: no etcd"), "{message}");
        assert!(
            message.contains("2. $CTRLQ_CONTROLPLANE_BIN is not set"),
            "{message}"
        );
        let cache = format!(".cache/ctrlq/controlplane/{CONTROL_PLANE_VERSION}/bin: no etcd, no");
        assert!(message.contains(&cache), "{message}");
        assert!(message.contains("3. "), "{message}");
        assert!(
            message.contains("scripts/install-controlplane"),
            "{message}"
        );
    }

    /// The version is the one the workspace's installer builds (read as it reads it).
    #[test]
    fn the_version_should_be_what_tools_controlplane_requires() {
        let go_mod = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/controlplane/go.mod");
        let Ok(text) = std::fs::read_to_string(&go_mod) else {
            return; // a packaged copy of the crate, outside the workspace
        };
        let version = |module: &str| {
            text.lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .find(|w| w.len() == 2 && w[0] == module && w[1].starts_with('v'))
                .map(|w| w[1].to_owned())
                .unwrap_or_else(|| panic!("{} requires no {module}", go_mod.display()))
        };
        let required = format!(
            "{}-etcd-{}",
            version("k8s.io/kubernetes"),
            version("go.etcd.io/etcd/server/v3")
        );
        assert_eq!(CONTROL_PLANE_VERSION, required);
    }
}
