//! Retry limiters for work queues (client-go's `default_rate_limiters`, on `governor`).
//!
//! This crate is a skeleton: the limiters are being built. Nothing is exported yet.
