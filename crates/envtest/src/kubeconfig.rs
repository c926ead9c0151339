//! The kubeconfig a [`ControlPlane`](crate::ControlPlane) writes for `kubectl`.

use std::path::Path;

use serde_json::json;

/// Its name in the control plane's directory.
pub(crate) const FILE: &str = "kubeconfig";

/// A kubeconfig (in JSON, which kubectl and kube-rs read as the YAML it is a subset of) with one
/// cluster, `envtest`, at `url` with the serving certificate `ca` as its root, and one user and
/// one context per `(identity, token)`, each named after the identity; the first is current.
pub(crate) fn render(url: &str, ca: &Path, identities: &[(&str, String)]) -> String {
    let users: Vec<_> = identities
        .iter()
        .map(|(name, token)| json!({ "name": name, "user": { "token": token } }))
        .collect();
    let contexts: Vec<_> = identities
        .iter()
        .map(|(name, _)| {
            json!({
                "name": name,
                "context": { "cluster": "envtest", "user": name, "namespace": "default" },
            })
        })
        .collect();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "envtest",
            "cluster": { "server": url, "certificate-authority": ca.display().to_string() },
        }],
        "users": users,
        "contexts": contexts,
        "current-context": identities.first().map(|(name, _)| *name),
    });
    serde_json::to_string_pretty(&config).expect("JSON values serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_rs_should_read_each_context() {
        let identities = [("admin", "a".to_owned()), ("alice", "b".to_owned())];
        let text = render("https://127.0.0.1:1", Path::new("/x/ca.crt"), &identities);
        let config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(config.current_context.as_deref(), Some("admin"));
        assert_eq!(config.contexts.len(), 2);
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:1"));
        assert_eq!(cluster.certificate_authority.as_deref(), Some("/x/ca.crt"));
    }
}
