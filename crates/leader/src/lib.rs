//! Async lease-based leader election over a pluggable lock.
//!
//! This crate is a skeleton: the elector and its locks are being built. Nothing is exported yet.
