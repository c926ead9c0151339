//! Shared by the integration tests: a seeded generator, a bounded wait, and a reading of one
//! series from the Prometheus text format.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

/// xorshift64*: deterministic per seed, good enough to pick delays and faults.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn millis(&mut self, max: u64) -> Duration {
        Duration::from_millis(self.below(max + 1))
    }
}

/// Awaits `f` for at most `limit` of paused time; a bug fails the test instead of hanging it.
pub async fn bounded<F: Future>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .expect("bounded wait ran out")
}

/// The value of `series` (name and labels, as printed) in the Prometheus `text`.
///
/// # Panics
///
/// If the series is not there, or its value is not a number (a test failure).
pub fn series_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}
