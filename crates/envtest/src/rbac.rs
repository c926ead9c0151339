//! Namespaces and rights for the least-privilege identities.

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

/// How long [`grant`] waits for the authorizer to allow what it granted.
const GRANT_TIMEOUT: Duration = Duration::from_secs(30);

/// The field manager of what this crate applies.
pub(crate) const FIELD_MANAGER: &str = "ctrlq-envtest";

/// Creates the namespace `name` as `admin` (a client of [`ADMIN`](crate::ADMIN)): each test
/// takes its own, so that tests sharing one control plane stay apart.
///
/// The `default` namespace may not exist yet when the API server is first ready; a test's own
/// namespace always does once this returns.
///
/// # Panics
///
/// When the API server refuses (a namespace of that name exists already, say).
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace};
///
/// # async fn test() {
/// let plane = ControlPlane::shared().await;
/// create_namespace(&plane.client(ADMIN), "my-test").await;
/// # }
/// ```
pub async fn create_namespace(admin: &kube::Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

/// Grants `user` the `verbs` on `resource` of the API group `group` (`""` for the core group)
/// in `namespace`, as `admin`; returns once the API server's authorizer allows each verb (its
/// RBAC cache follows the objects shortly after they are written), at most 30 s.
///
/// The rights are a Role and a RoleBinding named `<resource>-<user>` (a `/` of a subresource
/// written `-`), applied server-side: granting the same resource again replaces the verbs, and
/// deleting the RoleBinding revokes them.
///
/// # Panics
///
/// When the API server refuses, or the authorizer does not allow the verbs within 30 s.
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace, grant};
///
/// # async fn test() {
/// let plane = ControlPlane::shared().await;
/// let admin = plane.client(ADMIN);
/// create_namespace(&admin, "least-privilege").await;
/// grant(&admin, "least-privilege", "bob", "", "configmaps", &["get", "list", "watch"]).await;
/// grant(&admin, "least-privilege", "bob", "example.com", "widgets/status", &["patch"]).await;
/// let bob = plane.client("bob");
/// # }
/// ```
pub async fn grant(
    admin: &kube::Client,
    namespace: &str,
    user: &str,
    group: &str,
    resource: &str,
    verbs: &[&str],
) {
    let name = format!("{}-{user}", resource.replace('/', "-"));
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(vec![resource.into()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.into(),
            ..Subject::default()
        }]),
    };
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .patch(&name, &apply, &Patch::Apply(&role))
        .await
        .unwrap_or_else(|e| panic!("Role {name} for {user}: {e}"));
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .patch(&name, &apply, &Patch::Apply(&binding))
        .await
        .unwrap_or_else(|e| panic!("RoleBinding {name} for {user}: {e}"));
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let deadline = Instant::now() + GRANT_TIMEOUT;
    for verb in verbs {
        let attributes = ResourceAttributes {
            group: Some(group.into()),
            resource: Some(resource.into()),
            subresource: Some(subresource.into()).filter(|s: &String| !s.is_empty()),
            namespace: Some(namespace.into()),
            verb: Some((*verb).to_owned()),
            ..ResourceAttributes::default()
        };
        let what = format!("{user} to {verb} {resource} in {namespace}");
        wait_allowed(admin, user, attributes, deadline, &what).await;
    }
}

/// Grants `user` the `verbs` on Leases (`coordination.k8s.io`) in `namespace`: [`grant`] for a
/// leader-elected controller's lock.
///
/// # Panics
///
/// As [`grant`].
///
/// # Examples
///
/// ```no_run
/// use ctrlq_envtest::{ADMIN, ControlPlane, create_namespace, grant_leases};
///
/// # async fn test() {
/// let plane = ControlPlane::shared().await;
/// let admin = plane.client(ADMIN);
/// create_namespace(&admin, "election").await;
/// grant_leases(&admin, "election", "alice", &["get", "create", "update"]).await;
/// # }
/// ```
pub async fn grant_leases(admin: &kube::Client, namespace: &str, user: &str, verbs: &[&str]) {
    grant(
        admin,
        namespace,
        user,
        "coordination.k8s.io",
        "leases",
        verbs,
    )
    .await;
}

/// Asks the authorizer (a SubjectAccessReview) until it allows `user` what `attributes` say.
async fn wait_allowed(
    admin: &kube::Client,
    user: &str,
    attributes: ResourceAttributes,
    deadline: Instant,
    what: &str,
) {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            resource_attributes: Some(attributes),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviews = Api::<SubjectAccessReview>::all(admin.clone());
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap_or_else(|e| panic!("SubjectAccessReview of {what}: {e}"));
        if answer.status.is_some_and(|s| s.allowed) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not allowed {GRANT_TIMEOUT:?} after the grant"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
