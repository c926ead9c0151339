//! governor as an oracle for the bucket's arithmetic: on the path where neither reserves, our
//! GCRA and governor's make the same decisions with the same waits.
//!
//! Our `claim` reserves when the bucket is empty (Go's `Reserve`); governor's `check` refuses
//! and records nothing. So the model here applies our claim only when it conforms (a zero
//! wait) and drops it otherwise, which is what governor does, and compares every call: both
//! conform, or both refuse with the same wait until the next conforming instant.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, FakeRelativeClock};
use governor::{Quota, RateLimiter};
use proptest::prelude::*;

use crate::gcra::Gcra;

/// Runs `gaps` (nanoseconds between calls) through both and compares each decision.
fn agree(period_ns: u64, burst: u32, gaps: &[u64]) -> Result<(), TestCaseError> {
    let ours = Gcra::with_period(Duration::from_nanos(period_ns), burst).expect("a valid shape");
    let quota = Quota::with_period(Duration::from_nanos(period_ns))
        .expect("a positive period")
        .allow_burst(NonZeroU32::new(burst).expect("a positive burst"));
    let clock = FakeRelativeClock::default();
    let theirs = RateLimiter::direct_with_clock(quota, clock.clone());
    let (mut tat, mut now) = (0u64, 0u64);
    for (i, gap) in gaps.iter().enumerate() {
        clock.advance(Duration::from_nanos(*gap));
        now += gap;
        let (delay, next) = ours.claim(tat, now).expect("within MAX_DELAY");
        match theirs.check() {
            Ok(()) => {
                prop_assert_eq!(delay, 0, "call {}: governor conforms, ours waits", i);
                tat = next;
            }
            Err(not_until) => {
                prop_assert!(delay > 0, "call {}: governor refuses, ours conforms", i);
                let wait = not_until.wait_time_from(clock.now());
                prop_assert_eq!(wait, Duration::from_nanos(delay), "call {}", i);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn conforming_decisions_agree_with_governor(
        period_ns in 1u64..=2_000_000_000,
        burst in 1u32..=200,
        // Gaps from "at once" to a few periods, so buckets empty, refill partly and fill.
        gaps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..=4_000_000_000], 1..300),
    ) {
        agree(period_ns, burst, &gaps)?;
    }

    #[test]
    fn conforming_decisions_agree_with_governor_at_a_nanosecond_scale(
        period_ns in 1u64..=1_000,
        burst in 1u32..=10,
        gaps in prop::collection::vec(0u64..=3_000, 1..300),
    ) {
        agree(period_ns, burst, &gaps)?;
    }
}
