//! The workspace's one far-future limit: the delayed adds, the retry limiters and the
//! scheduling state clamp at the same `MAX_DELAY`. `ctrlq-ratelimit` and `ctrlq-queue-core`
//! each define it (neither depends on the other); this crate sees both and checks they agree.

use std::time::Duration;

#[test]
fn every_crate_clamps_at_the_one_max_delay() {
    let year = Duration::from_secs(365 * 24 * 3600);
    assert_eq!(ctrlq_queue_core::MAX_DELAY, year);
    assert_eq!(
        ctrlq_queue_async::workqueue::MAX_DELAY,
        ctrlq_queue_core::MAX_DELAY
    );
    assert_eq!(ctrlq_ratelimit::MAX_DELAY, ctrlq_queue_core::MAX_DELAY);
}
