//! The scheduling queue's settings, with kube-scheduler's defaults.

use std::fmt;
use std::time::Duration;

use ctrlq_ratelimit::capped_exponential;
use tokio::time::Instant;

use super::item::QueuedItem;

/// Settings of a [`SchedulingQueue`]; `Default` has kube-scheduler's values.
///
/// | Setting | Default |
/// |---|---|
/// | initial backoff | 1 s |
/// | max backoff (zero disables backoff) | 10 s |
/// | max time in unschedulable before the leftover flush moves an item | 5 min |
/// | pop from backoff when active is empty | on |
///
/// kube-scheduler sweeps unschedulable every 30 s for items past the maximum, so an item
/// leaves up to 30 s late. Here each item leaves at its own deadline (see
/// [`max_in_unschedulable`](Self::max_in_unschedulable)): the queue's only timer is one sleep
/// until the earliest deadline, so an idle queue wakes nothing, and under paused time the
/// clock jumps straight to the next deadline instead of stopping every 30 s.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_async::scheduling::SchedulingQueueConfig;
///
/// let config = SchedulingQueueConfig::default()
///     .initial_backoff(Duration::from_secs(2))
///     .max_backoff(Duration::from_secs(20));
/// assert_eq!(config.backoff_duration(1), Duration::from_secs(2));
/// assert_eq!(config.backoff_duration(3), Duration::from_secs(8));
/// assert_eq!(config.backoff_duration(60), Duration::from_secs(20));
/// ```
///
/// [`SchedulingQueue`]: crate::scheduling::SchedulingQueue
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulingQueueConfig {
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) max_in_unschedulable: Duration,
    pub(crate) pop_from_backoff: bool,
}

impl SchedulingQueueConfig {
    /// The first backoff; each further failure doubles it.
    #[must_use]
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.initial_backoff = d;
        self
    }

    /// The longest backoff; zero disables backoff altogether.
    #[must_use]
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.max_backoff = d;
        self
    }

    /// How long an item may stay unschedulable before the leftover flush moves it: it moves
    /// as soon as it has waited strictly longer than this (a gated item: since its gates were
    /// last asked, when it is asked again), at its own deadline, not at a periodic sweep.
    #[must_use]
    pub fn max_in_unschedulable(mut self, d: Duration) -> Self {
        self.max_in_unschedulable = d;
        self
    }

    /// Whether `pop`, when active is empty, takes the rejected item whose backoff ends first,
    /// before its backoff is over (kube-scheduler's `SchedulerPopFromBackoffQ`, on by default
    /// there). Items whose attempt failed with an error (no rejector, no pending plugin) are
    /// never taken early: they always wait out their backoff, as kube-scheduler's error
    /// backoff does.
    #[must_use]
    pub fn pop_from_backoff(mut self, on: bool) -> Self {
        self.pop_from_backoff = on;
        self
    }

    /// The backoff after `count` failures: `initial · 2^(count − 1)` capped at the max; zero
    /// for a count of zero or a zero max. Never overflows: this is the retry limiters'
    /// [`capped_exponential`] with exponent `count − 1`.
    ///
    /// [`capped_exponential`]: ctrlq_ratelimit::capped_exponential
    pub fn backoff_duration(&self, count: u32) -> Duration {
        if count == 0 || self.max_backoff.is_zero() {
            return Duration::ZERO;
        }
        capped_exponential(self.initial_backoff, self.max_backoff, count - 1)
    }

    /// When the leftover flush takes `item`: the first instant at which it has been waiting
    /// strictly longer than the maximum, counted from its entry into unschedulable or, for a
    /// gated item, from the last time the flush asked its gates. `None` if that is beyond what
    /// an instant holds: never.
    ///
    /// The strict rule is kube-scheduler's (`flushUnschedulablePodsLeftover`); as an instant it
    /// is 1 ns past `since + max`, so a timer and the check agree on one value.
    pub(crate) fn leftover_deadline<K, T>(&self, item: &QueuedItem<K, T>) -> Option<Instant> {
        let marks = item.info();
        let flushed = marks.flushed_at.filter(|_| marks.gating.is_some());
        let since = flushed.unwrap_or(item.timestamp);
        since
            .checked_add(self.max_in_unschedulable)
            .and_then(|t| t.checked_add(Duration::from_nanos(1)))
    }

    /// Checks the settings; building a queue calls this, so a queue never runs with bad ones.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] rule the settings break.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.max_backoff.is_zero() {
            if self.initial_backoff.is_zero() {
                return Err(ConfigError::ZeroInitialBackoff);
            }
            if self.initial_backoff > self.max_backoff {
                return Err(ConfigError::InitialAboveMax {
                    initial: self.initial_backoff,
                    max: self.max_backoff,
                });
            }
        }
        if self.max_in_unschedulable.is_zero() {
            return Err(ConfigError::ZeroMaxInUnschedulable);
        }
        Ok(())
    }
}

/// A [`SchedulingQueueConfig`] a queue refuses to be built with.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ctrlq_queue_async::scheduling::{ConfigError, SchedulingQueue, SchedulingQueueConfig};
///
/// let config = SchedulingQueueConfig::default().max_in_unschedulable(Duration::ZERO);
/// let refused = SchedulingQueue::<&str, i64>::new(config).unwrap_err();
/// assert_eq!(refused, ConfigError::ZeroMaxInUnschedulable);
/// assert_eq!(refused.to_string(), "the maximum time in unschedulable must be positive");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The initial backoff is zero while backoff is on (a non-zero max backoff).
    ZeroInitialBackoff,
    /// The initial backoff exceeds the max backoff.
    InitialAboveMax {
        /// The initial backoff.
        initial: Duration,
        /// The max backoff.
        max: Duration,
    },
    /// The maximum time in unschedulable is zero.
    ZeroMaxInUnschedulable,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroInitialBackoff => f.write_str("the initial backoff must be positive"),
            ConfigError::InitialAboveMax { initial, max } => write!(
                f,
                "the initial backoff {initial:?} exceeds the max backoff {max:?}"
            ),
            ConfigError::ZeroMaxInUnschedulable => {
                f.write_str("the maximum time in unschedulable must be positive")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Default for SchedulingQueueConfig {
    fn default() -> Self {
        SchedulingQueueConfig {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_in_unschedulable: Duration::from_secs(5 * 60),
            pop_from_backoff: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(initial: u64, max: u64) -> SchedulingQueueConfig {
        SchedulingQueueConfig::default()
            .initial_backoff(Duration::from_nanos(initial))
            .max_backoff(Duration::from_nanos(max))
    }

    #[test]
    fn backoff_duration_matches_the_originals_cases() {
        assert_eq!(config(1, 32).backoff_duration(0), Duration::ZERO);
        assert_eq!(config(1, 32).backoff_duration(16), Duration::from_nanos(32));
        let max32 = i32::MAX as u64;
        assert_eq!(
            config(1, max32).backoff_duration(32),
            Duration::from_nanos(max32)
        );
        let max64 = i64::MAX as u64;
        assert_eq!(
            config(1, max64).backoff_duration(64),
            Duration::from_nanos(max64)
        );
        assert_eq!(
            config(1, max64).backoff_duration(u32::MAX),
            Duration::from_nanos(max64)
        );
    }

    #[test]
    fn backoff_duration_doubles_to_the_cap_and_zero_max_disables() {
        let c = SchedulingQueueConfig::default();
        let seq: Vec<u64> = (1..=7).map(|n| c.backoff_duration(n).as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(
            c.max_backoff(Duration::ZERO).backoff_duration(3),
            Duration::ZERO
        );
        let huge = c.max_backoff(Duration::MAX).initial_backoff(Duration::MAX);
        assert_eq!(huge.backoff_duration(200), Duration::MAX);
    }
}
