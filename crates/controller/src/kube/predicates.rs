//! Predicates for [`Watch::with_predicate`](super::Watch::with_predicate): each gives a value
//! of the part of an object a controller acts on, and a change that leaves it as it was yields
//! no key. `None` (an object without that part) lets every change through.
//!
//! # Examples
//!
//! Reconcile on a spec change or a label change, not on a status write:
//!
//! ```
//! use ctrlq_controller::kube::predicates;
//! use k8s_openapi::api::apps::v1::Deployment;
//! let spec_or_labels = |d: &Deployment| {
//!     Some(predicates::generation(d)? ^ predicates::labels(d)?.rotate_left(1))
//! };
//! let mut d = Deployment::default();
//! d.metadata.generation = Some(3);
//! assert!(spec_or_labels(&d).is_some());
//! ```

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use ::kube::Resource;

/// `metadata.generation`, which the API server raises on every change of the spec (not of the
/// status or the metadata): controller-runtime's `GenerationChangedPredicate`. `None` for
/// kinds without a generation (ConfigMaps, Secrets), whose every change passes.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::apps::v1::Deployment;
/// let mut d = Deployment::default();
/// d.metadata.generation = Some(2);
/// assert_eq!(ctrlq_controller::kube::predicates::generation(&d), Some(2));
/// ```
pub fn generation<K: Resource>(object: &K) -> Option<u64> {
    object.meta().generation.and_then(|g| u64::try_from(g).ok())
}

/// A hash of `metadata.labels` (an object without labels hashes as one with none):
/// controller-runtime's `LabelChangedPredicate`.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use ctrlq_controller::kube::predicates::labels;
/// let mut pod = Pod::default();
/// let none = labels(&pod);
/// pod.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// assert_ne!(labels(&pod), none);
/// ```
pub fn labels<K: Resource>(object: &K) -> Option<u64> {
    Some(hash_map(object.meta().labels.as_ref()))
}

/// A hash of `metadata.annotations`: controller-runtime's `AnnotationChangedPredicate`.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use ctrlq_controller::kube::predicates::annotations;
/// let mut pod = Pod::default();
/// let none = annotations(&pod);
/// pod.metadata.annotations = Some([("note".to_owned(), "x".to_owned())].into());
/// assert_ne!(annotations(&pod), none);
/// ```
pub fn annotations<K: Resource>(object: &K) -> Option<u64> {
    Some(hash_map(object.meta().annotations.as_ref()))
}

/// A hash of `metadata.finalizers`, for a controller that reacts to a finalizer added or
/// removed by another.
///
/// # Examples
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use ctrlq_controller::kube::predicates::finalizers;
/// let mut pod = Pod::default();
/// let none = finalizers(&pod);
/// pod.metadata.finalizers = Some(vec!["example.com/cleanup".to_owned()]);
/// assert_ne!(finalizers(&pod), none);
/// ```
pub fn finalizers<K: Resource>(object: &K) -> Option<u64> {
    let mut h = DefaultHasher::new();
    object.meta().finalizers.hash(&mut h);
    Some(h.finish())
}

fn hash_map(map: Option<&BTreeMap<String, String>>) -> u64 {
    let mut h = DefaultHasher::new();
    map.filter(|m| !m.is_empty()).hash(&mut h);
    h.finish()
}
