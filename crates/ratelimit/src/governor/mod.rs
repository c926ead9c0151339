//! The [governor](https://docs.rs/governor) crate where its model fits (feature `governor`): a governor clock that
//! follows tokio's, and a user's governor rate limiter as a retry limiter.
//!
//! # Which to use when
//!
//! - For a work queue's retries, the default: [`BucketRateLimiter`](crate::BucketRateLimiter)
//!   and the per-item limiters. They *reserve*, as client-go's limiters do (Go's
//!   `Reserve().Delay()`): a burst of failures gets increasing delays, 0, T, 2T, ..., so the
//!   retries come back spread out. A governor limiter does not reserve: it answers "conforming
//!   now" or "not until instant X", and every caller refused at once is told the same X.
//! - [`GovernorRateLimiter`] / [`GovernorKeyedRateLimiter`] when the retries must share a quota
//!   with the rest of the application, which already paces its calls with a governor
//!   `RateLimiter`: the queue's retries then take cells from that same quota. Each refused
//!   `when` reports the wait until the next conforming instant and claims nothing, so keys
//!   refused together retry together and all but one are refused again.
//! - [`TokioClock`] for any governor limiter of the application that tests should drive with
//!   `tokio::time::pause()`: governor ships no clock over tokio's.
//!
//! # Why the default is not governor
//!
//! Go's reservations need a claim on a future token, which governor's `check` does not offer,
//! and governor counts time in `u64` nanoseconds from its start, which the settings client-go
//! accepts (a token a day, a burst of 100,000, reservations up to a year) overflow. The crate's
//! own GCRA keeps one `AtomicU64`, reserves exactly as Go does, and rejects shapes it cannot
//! represent ([`MAX_HORIZON`](crate::MAX_HORIZON)). On the path where neither reserves (a call
//! that conforms) both make the same decisions; the crate's tests check that against governor on
//! random rates, bursts and call times.
//!
//! Wait on a governor limiter with `tokio::time::sleep(not_until.wait_time_from(now))`, never
//! with governor's `until_ready`: it sleeps on a wall-clock timer that a paused test cannot move.

mod clock;
mod direct;
mod keyed;

pub use clock::{TokioClock, TokioInstant};
pub use direct::GovernorRateLimiter;
pub use keyed::GovernorKeyedRateLimiter;
