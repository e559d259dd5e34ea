//! What a data plane tells the control plane about itself in the heartbeats
//! of its watch stream: how many requests it answered and how much usage
//! waits in its spool. Counted per instance, read by `discovery`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one data plane.
#[derive(Debug, Default)]
pub struct Vitals {
    requests: AtomicU64,
    backlog: AtomicU64,
}

// === impl Vitals ===

impl Vitals {
    /// One more request answered (any status).
    pub fn answered(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Usage records spooled and not yet acknowledged by the control plane.
    pub fn set_backlog(&self, records: usize) {
        self.backlog.store(u64::try_from(records).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Requests answered since start.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
    }
}
