//! Jittered exponential backoff for reconnecting and resending: each delay
//! doubles up to a cap and is drawn uniformly from its upper half, so a fleet
//! of data planes does not reconnect in lockstep.

use std::time::Duration;

use rand::RngExt as _;

/// Delays of `min`, `2·min`, … capped at `max`, each jittered to [d/2, d].
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

// === impl Backoff ===

impl Backoff {
    /// Starts at `min`; never waits more than `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff { min, max, next: min }
    }

    /// The next delay to wait; grows the one after it.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.next.min(self.max);
        self.next = (self.next * 2).min(self.max);
        let half = ceiling / 2;
        let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(rand::rng().random_range(0..=jitter_ms))
    }

    /// Back to `min` after a success.
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        for _ in 0..20 {
            assert!(b.next_delay() <= Duration::from_secs(5));
        }
        let capped = b.next_delay();
        assert!(capped >= Duration::from_millis(2500), "{capped:?}");
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
