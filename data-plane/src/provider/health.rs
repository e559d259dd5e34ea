//! Channel health as this data plane sees it. A channel is reported to the
//! control plane, which takes it out of rotation for every data plane
//! (status `auto_disabled`, via the snapshot), once `AUTO_DISABLE_AFTER`
//! requests in a row failed on it for reasons that are the channel's: its
//! key refused (401, 403), the upstream unreachable or silent, or 5xx
//! answers — these only when they came from at least two different clients,
//! so one client's bad requests never take a shared channel offline. Each
//! request counts once per channel however often it was retried there. An
//! upstream 429 never counts: it cools the channel down for its
//! `Retry-After` (else a backoff doubling from 1 s to 60 s), during which
//! failover prefers other channels. A success resets both. Reports go out
//! from a spawned task, never on the request path; a lost report is made
//! again after the next run of failures.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use axum::http::StatusCode;

use super::keys::KeyHealth;
use crate::{error::ProxyError, policy::domain::Channel};

/// Requests in a row failing for the channel's own reasons that get it
/// reported. Mirrors the control plane's `policy::AUTO_DISABLE_AFTER`, below
/// which it ignores a report.
pub const AUTO_DISABLE_AFTER: u32 = 5;
/// Different clients whose requests must have failed with 5xx before 5xx
/// answers alone get a channel reported.
pub const DISTINCT_CLIENTS_FOR_5XX: usize = 2;
/// First cool-down after a 429 without `Retry-After`; doubles per 429 in a row.
const COOL_DOWN_BASE: Duration = Duration::from_secs(1);
/// Longest cool-down, `Retry-After` included.
const COOL_DOWN_CAP: Duration = Duration::from_secs(60);

/// A channel that keeps failing for its own reasons (or one of its keys
/// refused), as reported to the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelFailure {
    pub channel_id: String,
    /// Requests in a row that failed on it.
    pub consecutive_failures: u32,
    /// The last failed request's upstream status (0: none).
    pub last_status: u32,
    /// Why (`ProxyError::reason`, or `key refused`).
    pub reason: String,
    /// The refused key, when the report is about one key.
    pub key_id: String,
}

/// Where channel failures are reported: the control plane
/// (`control::HealthReports`).
pub trait FailureReports: Send + Sync + 'static {
    /// Sends `failure` from a spawned task; never waits for it (needs a
    /// runtime, which every caller runs inside).
    fn report(&self, failure: ChannelFailure);
}

/// Failure streaks and cool-downs per channel id, and where to report.
pub struct Health {
    channels: Mutex<HashMap<String, ChannelHealth>>,
    report_to: Option<Box<dyn FailureReports>>,
    /// The keys of pooled channels.
    pub keys: KeyHealth,
}

/// One channel's current streak of failed requests and its cool-down.
#[derive(Default)]
struct ChannelHealth {
    failures: u32,
    /// Whether the streak has a failure that is plainly the channel's (its
    /// key refused, unreachable, silent).
    channel_fault: bool,
    /// Clients whose requests got a 5xx in this streak (a few at most).
    clients_5xx: Vec<String>,
    /// The last request counted, so a retried request counts once.
    last_request: String,
    /// 429s in a row.
    throttled: u32,
    cool_until: Option<Instant>,
}

// === impl Health ===

impl Health {
    /// Counts failures and reports them to `reports`.
    pub fn new(reports: impl FailureReports) -> Health {
        Health { channels: Mutex::default(), report_to: Some(Box::new(reports)), keys: KeyHealth::default() }
    }

    /// Counts failures but reports to no one (tests, tools).
    pub fn unreported() -> Health {
        Health { channels: Mutex::default(), report_to: None, keys: KeyHealth::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ChannelHealth>> {
        // Every update is a few field writes: a panic cannot leave one half done.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An attempt on `channel` got an answer that clears it: the streak and
    /// any cool-down end.
    pub fn succeeded(&self, channel: &str) {
        let mut channels = self.lock();
        if channels.contains_key(channel) {
            channels.remove(channel);
        }
    }

    /// Whether `channel` is cooling down after an upstream 429.
    pub fn cooling(&self, channel: &str) -> bool {
        self.lock().get(channel).and_then(|h| h.cool_until).is_some_and(|until| until > Instant::now())
    }

    /// The upstream answered 429: `channel` cools down for `retry_after`
    /// (capped), else for a backoff that doubles per 429 in a row.
    pub fn throttled(&self, channel: &str, retry_after: Option<Duration>) {
        let mut channels = self.lock();
        let health = channels.entry(channel.to_owned()).or_default();
        health.throttled = health.throttled.saturating_add(1);
        let backoff = COOL_DOWN_BASE.saturating_mul(1 << health.throttled.min(7).saturating_sub(1));
        let wait = retry_after.unwrap_or(backoff).min(COOL_DOWN_CAP);
        health.cool_until = Some(Instant::now() + wait);
        tracing::info!(channel, cool_down_ms = wait.as_millis() as u64, "upstream throttled the channel");
    }

    /// The upstream refused (`status` 401 or 403) the key `channel` was
    /// sent with: the key is held out here and reported at once, so the
    /// control plane takes it out of every data plane's pool.
    pub fn key_refused(&self, channel: &Channel, status: u16) {
        self.keys.refused(&channel.id, &channel.key_id);
        tracing::warn!(channel = %channel.id, key = %channel.key_id, status, "upstream refused a channel key");
        let Some(reports) = &self.report_to else {
            return;
        };
        reports.report(ChannelFailure {
            channel_id: channel.id.clone(),
            consecutive_failures: 1,
            last_status: u32::from(status),
            reason: "key refused".into(),
            key_id: channel.key_id.clone(),
        });
    }

    /// Request `request_id` of `client` failed on `channel` with `error`.
    /// Errors that are not the channel's (`ProxyError::is_channel_fault`)
    /// leave the streak alone, as does the same request counted before.
    /// Reaching the threshold spawns a report and restarts the streak.
    pub fn failed(&self, channel: &str, error: &ProxyError, request_id: &str, client: &str) {
        let Some(failure) = self.count(channel, error, request_id, client) else {
            return;
        };
        tracing::warn!(
            channel,
            failures = failure.consecutive_failures,
            reason = %failure.reason,
            "channel keeps failing; asking the control plane to take it out of rotation"
        );
        let Some(reports) = &self.report_to else {
            return;
        };
        reports.report(failure);
    }

    /// Adds one failed request; the report to send when the threshold is
    /// reached.
    fn count(&self, channel: &str, error: &ProxyError, request_id: &str, client: &str) -> Option<ChannelFailure> {
        if !error.is_channel_fault() {
            return None;
        }
        let mut channels = self.lock();
        let health = channels.entry(channel.to_owned()).or_default();
        if health.last_request == request_id {
            return None;
        }
        health.last_request = request_id.to_owned();
        health.failures += 1;
        let status = match error {
            ProxyError::UpstreamStatus { status, .. } => Some(*status),
            _ => None,
        };
        match status {
            Some(status) if status.is_server_error() => {
                if !health.clients_5xx.iter().any(|c| c == client)
                    && health.clients_5xx.len() < DISTINCT_CLIENTS_FOR_5XX
                {
                    health.clients_5xx.push(client.to_owned());
                }
            }
            _ => health.channel_fault = true,
        }
        let enough_clients = health.clients_5xx.len() >= DISTINCT_CLIENTS_FOR_5XX;
        if health.failures < AUTO_DISABLE_AFTER || !(health.channel_fault || enough_clients) {
            return None;
        }
        let consecutive_failures = health.failures;
        let cool_until = health.cool_until;
        *health = ChannelHealth { cool_until, ..ChannelHealth::default() };
        Some(ChannelFailure {
            channel_id: channel.to_owned(),
            consecutive_failures,
            last_status: u32::from(status.map_or(0, |s: StatusCode| s.as_u16())),
            reason: error.reason().to_owned(),
            key_id: String::new(),
        })
    }

    /// The current streak of `channel` (0: its last request succeeded).
    pub(crate) fn failures(&self, channel: &str) -> u32 {
        self.lock().get(channel).map_or(0, |h| h.failures)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn status(code: u16) -> ProxyError {
        ProxyError::UpstreamStatus { status: StatusCode::from_u16(code).unwrap(), message: String::new() }
    }

    #[test]
    fn every_fifth_failed_request_is_reported_and_success_resets() {
        let health = Health::unreported();
        for i in 0..4 {
            assert!(health.count("a", &ProxyError::UpstreamConnect, &format!("r{i}"), "t1").is_none());
        }
        health.succeeded("a");
        assert_eq!(health.failures("a"), 0);
        for i in 0..4 {
            assert!(health.count("a", &status(401), &format!("s{i}"), "t1").is_none());
        }
        let report = health.count("a", &status(502), "s4", "t1").unwrap();
        assert_eq!(report.channel_id, "a");
        assert_eq!(report.consecutive_failures, AUTO_DISABLE_AFTER);
        assert_eq!(report.last_status, 502);
        assert_eq!(report.reason, "upstream_status");
        assert_eq!(health.failures("a"), 0, "the streak restarts after a report");
    }

    #[test]
    fn a_retried_request_counts_once() {
        let health = Health::unreported();
        for _ in 0..10 {
            assert!(health.count("a", &ProxyError::UpstreamConnect, "r1", "t1").is_none());
        }
        assert_eq!(health.failures("a"), 1);
    }

    #[test]
    fn one_clients_5xx_never_disable_a_channel_but_several_clients_do() {
        let health = Health::unreported();
        for i in 0..20 {
            assert!(health.count("a", &status(500), &format!("r{i}"), "t1").is_none(), "request {i}");
        }
        let health = Health::unreported();
        for i in 0..4 {
            let client = if i % 2 == 0 { "t1" } else { "t2" };
            assert!(health.count("a", &status(503), &format!("r{i}"), client).is_none());
        }
        assert!(health.count("a", &status(503), "r4", "t1").is_some());
    }

    #[test]
    fn client_mistakes_and_throttling_do_not_count_against_a_channel() {
        let health = Health::unreported();
        for i in 0..10 {
            assert!(health.count("a", &status(400), &format!("r{i}"), "t1").is_none());
            assert!(health.count("a", &status(429), &format!("q{i}"), &format!("t{i}")).is_none());
        }
        assert_eq!(health.failures("a"), 0);
        health.count("b", &ProxyError::UpstreamTimeout, "r1", "t1");
        assert_eq!((health.failures("a"), health.failures("b")), (0, 1));
    }

    #[test]
    fn a_429_cools_the_channel_down_until_a_success() {
        let health = Health::unreported();
        assert!(!health.cooling("a"));
        health.throttled("a", Some(Duration::from_secs(30)));
        assert!(health.cooling("a"));
        health.succeeded("a");
        assert!(!health.cooling("a"));
        health.throttled("a", Some(Duration::ZERO));
        assert!(!health.cooling("a"), "Retry-After: 0 means now");
    }
}
