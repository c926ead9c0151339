//! Retry limiters for work queues: client-go's `util/workqueue/default_rate_limiters.go`, driven
//! by tokio's (pausable) clock.
//!
//! A [`RateLimiter`] decides how long a failed key waits before its next try:
//!
//! | limiter | behaviour |
//! |---|---|
//! | [`BucketRateLimiter`] | one token bucket for all keys; Go's `Reserve().Delay()` (never an error) |
//! | [`ItemBucketRateLimiter`] | one bucket per key, idle buckets reclaimed |
//! | [`ExponentialRateLimiter`] | `base · 2^failures` per key, capped at `max`, overflow safe |
//! | [`FastSlowRateLimiter`] | `fast` for the first n failures, then `slow` |
//! | [`MaxOfRateLimiter`] | the longest delay of several limiters (all are charged) |
//! | [`WithMaxWaitRateLimiter`] | caps another limiter |
//!
//! [`default_controller_rate_limiter`] and [`default_item_based_rate_limiter`] are client-go's
//! defaults; [`capped_exponential`] is the exponential backoff arithmetic on its own. Differences
//! from Go, all deliberate: bad parameters are a [`ConfigError`] instead of a hot loop or a panic
//! (a zero rate too; Go's `rate.Inf` is [`BucketRateLimiter::unlimited`]); a bucket's shape must
//! fit [`MAX_HORIZON`] and its reservations stop at [`MAX_DELAY`] (a year, the workspace's
//! one far-future limit); per-item maps are
//! bounded (kubernetes/kubernetes#138743) and evict keys that stopped failing first; the buckets
//! read `tokio::time::Instant`, never the wall clock.
//!
//! `tokio::time::Instant` is the clock of the runtime the calling thread is in. Called from a
//! plain thread outside any runtime, a bucket reads the real clock, which a paused test has
//! left behind: call it under the runtime's `Handle::enter` there. (`ctrlq_queue_async`'s queues do
//! that for you when a plain thread adds a key rate-limited.)
//!
//! The per-item maps hash with a random seed per map. Tests of which keys a full map evicts fix
//! it on the limiter they test (`with_hash_seed`); no feature changes how a build hashes.
//!
//! # Locks
//!
//! Every lock of the workspace's crates is `parking_lot`'s `Mutex`, one family for all: it does
//! not poison, so a panic in a caller's code while a lock is held (a hook, a hint, a lock
//! backend) cannot wedge what the lock guards, which is consistent between transitions; it
//! spins briefly before parking, which suits locks held for a few hundred nanoseconds; and its
//! guard is not `Send`, so a lock held across an `.await` does not compile in a spawned task.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use ctrlq_ratelimit::{RateLimiter, default_controller_rate_limiter};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let limiter: Arc<dyn RateLimiter<String>> = Arc::new(default_controller_rate_limiter());
//! let key = "ns/name".to_string();
//! assert_eq!(limiter.when(&key), Duration::from_millis(5));
//! limiter.forget(&key);
//! assert_eq!(limiter.num_requeues(&key), 0);
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bounded;
mod bucket;
mod clock;
mod defaults;
mod error;
mod exponential;
mod fast_slow;
mod gcra;
#[cfg(feature = "governor")]
#[cfg_attr(docsrs, doc(cfg(feature = "governor")))]
pub mod governor;
#[cfg(test)]
mod governor_oracle;
mod item_bucket;
mod limiter;
mod max_of;
mod max_wait;

pub use bounded::DEFAULT_MAX_KEYS;
pub use bucket::BucketRateLimiter;
pub use defaults::{default_controller_rate_limiter, default_item_based_rate_limiter};
pub use error::ConfigError;
pub use exponential::{ExponentialRateLimiter, capped_exponential};
pub use fast_slow::FastSlowRateLimiter;
pub use gcra::{MAX_DELAY, MAX_HORIZON, MAX_PERIOD};
pub use item_bucket::ItemBucketRateLimiter;
pub use limiter::RateLimiter;
pub use max_of::MaxOfRateLimiter;
pub use max_wait::WithMaxWaitRateLimiter;
