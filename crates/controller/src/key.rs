//! [`Key`]: what a controller's key must be.

use std::fmt;
use std::hash::Hash;

/// What a key must be: the work queue's bounds, and `Debug` for the reconcile span.
///
/// Implemented for every type with these bounds.
pub trait Key: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static {}

impl<T: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static> Key for T {}
