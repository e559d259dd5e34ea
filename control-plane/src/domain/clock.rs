//! The clock budget windows are read by: the system clock, or the system
//! clock moved by an offset, so that tests can step into the next day,
//! week or month without waiting for it.

use std::sync::{
    Arc,
    atomic::{AtomicI64, Ordering},
};

use crate::domain::now_unix;

/// Unix seconds for leases and window answers; cheap to clone, and clones
/// share their offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset: Arc<AtomicI64>,
}

// === impl Clock ===

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// Unix seconds now, offset included.
    pub fn now(&self) -> i64 {
        now_unix().saturating_add(self.offset.load(Ordering::Relaxed))
    }

    /// Moves this clock (and every clone of it) `secs` on.
    pub fn advance(&self, secs: i64) {
        self.offset.fetch_add(secs, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_move_together() {
        let clock = Clock::system();
        let clone = clock.clone();
        clock.advance(86_400);
        let now = now_unix();
        assert!((now + 86_400..=now + 86_401).contains(&clone.now()), "{}", clone.now());
    }
}
