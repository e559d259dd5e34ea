//! Channel failures as data planes report them. One data plane (or one
//! stolen node key) cannot take a channel out of rotation for the whole
//! fleet: a channel is auto-disabled only once `QUORUM` distinct data
//! planes reported it failing within `WINDOW` (or the only data plane
//! there is). A refused upstream key is not decided here: the pool sets
//! that key aside, whoever saw it. Each replica counts the reports of the
//! data planes whose watch stream it holds, so with several replicas the
//! quorum is among the data planes of one replica.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// How long a data plane's report that a channel keeps failing counts.
pub const WINDOW: Duration = Duration::from_secs(300);
/// Distinct data planes that must agree, in a fleet of at least as many.
pub const QUORUM: usize = 2;

/// Who reported which channel failing, and when; cheap to share by `Arc`.
#[derive(Debug, Default)]
pub struct Failures {
    /// Channel id → node id → when it last reported the channel failing.
    reports: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

// === impl Failures ===

impl Failures {
    /// Notes that data plane `node` saw `channel` keep failing; returns
    /// whether enough data planes of a fleet of `live` agree to take it out
    /// of rotation (then forgets the channel's reports).
    pub fn failing(&self, channel: &str, node: &str, live: usize) -> bool {
        let now = Instant::now();
        let mut reports = self.reports.lock().unwrap_or_else(PoisonError::into_inner);
        // Reports past the window are dropped, for every channel.
        reports.retain(|_, nodes| {
            nodes.retain(|_, at| now.duration_since(*at) < WINDOW);
            !nodes.is_empty()
        });
        let nodes = reports.entry(channel.to_owned()).or_default();
        nodes.insert(node.to_owned(), now);
        let agreed = nodes.len() >= QUORUM.min(live.max(1));
        if agreed {
            reports.remove(channel);
        }
        agreed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_data_plane_of_several_cannot_disable_a_channel_alone() {
        let failures = Failures::default();
        assert!(!failures.failing("c1", "dp-1", 3), "one of three");
        assert!(!failures.failing("c1", "dp-1", 3), "the same one again");
        assert!(!failures.failing("c2", "dp-2", 3), "another channel");
        assert!(failures.failing("c1", "dp-2", 3), "a second data plane agrees");
        assert!(!failures.failing("c1", "dp-3", 3), "the reports start afresh");
        assert!(failures.failing("c9", "dp-1", 1), "the only data plane decides alone");
    }
}
