//! Tokio-native work queues that controller workers await on.
//!
//! This crate is a skeleton: the work queue, the delaying and rate-limiting queues and the
//! scheduling queue are being built on top of [`queue_core`]. Nothing is exported yet.
