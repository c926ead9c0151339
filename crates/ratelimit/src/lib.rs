//! Retry limiters for work queues (client-go's `default_rate_limiters`, on `governor`).
//!
//! The [`RateLimiter`] trait decides how long a failed key waits before its next try.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod limiter;

pub use limiter::RateLimiter;
