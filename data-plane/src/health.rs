//! Channel health as this data plane sees it: consecutive failed upstream
//! attempts per channel. Every `AUTO_DISABLE_AFTER` failures in a row the
//! channel is reported to the control plane, which takes it out of rotation
//! for every data plane (status `auto_disabled`, via the snapshot); a success
//! resets the count. Reports go out from a spawned task, never on the request
//! path, and a lost report is simply made again after the next run of
//! failures.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::Duration,
};

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};

use crate::{error::ProxyError, grpc::ControlPlane};

/// Consecutive failures that get a channel reported. Mirrors the control
/// plane's `policy::AUTO_DISABLE_AFTER`, below which it ignores a report.
pub const AUTO_DISABLE_AFTER: u32 = 5;
/// Longest a health report may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Failure counts per channel id, and where to report.
pub struct Health {
    failures: Mutex<HashMap<String, u32>>,
    report_to: Option<(ControlPlane, String)>,
}

// === impl Health ===

impl Health {
    /// Counts failures and reports to `control` as node `node_id`.
    pub fn new(control: ControlPlane, node_id: &str) -> Health {
        Health { failures: Mutex::default(), report_to: Some((control, node_id.to_owned())) }
    }

    /// Counts failures but reports to no one (tests, tools).
    pub fn unreported() -> Health {
        Health { failures: Mutex::default(), report_to: None }
    }

    /// An attempt on `channel` got an answer that clears it: the count restarts.
    pub fn succeeded(&self, channel: &str) {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).remove(channel);
    }

    /// An attempt on `channel` failed with `error`. Errors that are not the
    /// channel's fault (`ProxyError::is_channel_fault`) leave the count
    /// alone. Reaching the threshold spawns a report and restarts the count.
    pub fn failed(&self, channel: &str, error: &ProxyError) {
        let Some(failure) = self.count(channel, error) else {
            return;
        };
        tracing::warn!(
            channel,
            failures = failure.consecutive_failures,
            reason = %failure.reason,
            "channel keeps failing; asking the control plane to take it out of rotation"
        );
        let Some((control, node_id)) = &self.report_to else {
            return;
        };
        let (control, node_id) = (control.clone(), node_id.clone());
        // Needs a runtime; every caller runs inside one.
        tokio::spawn(report(control, node_id, failure));
    }

    /// Adds one failure; the report to send when the threshold is reached.
    fn count(&self, channel: &str, error: &ProxyError) -> Option<pb::ChannelFailure> {
        if !error.is_channel_fault() {
            return None;
        }
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(channel.to_owned()).or_default();
        *count += 1;
        if *count < AUTO_DISABLE_AFTER {
            return None;
        }
        let consecutive_failures = *count;
        failures.remove(channel);
        let last_status = match error {
            ProxyError::UpstreamStatus { status, .. } => u32::from(status.as_u16()),
            _ => 0,
        };
        Some(pb::ChannelFailure {
            channel_id: channel.to_owned(),
            consecutive_failures,
            last_status,
            reason: error.reason().to_owned(),
        })
    }

    /// The current count of `channel`.
    #[cfg(test)]
    pub(crate) fn failures(&self, channel: &str) -> u32 {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).get(channel).copied().unwrap_or(0)
    }
}

async fn report(control: ControlPlane, node_id: String, failure: pb::ChannelFailure) {
    let channel = failure.channel_id.clone();
    let mut client = PolicyServiceClient::new(control.channel.clone());
    let mut request = control.request(pb::ChannelHealthRequest { node_id, failures: vec![failure] });
    request.set_timeout(CALL_TIMEOUT);
    match tokio::time::timeout(CALL_TIMEOUT, client.report_channel_health(request)).await {
        Ok(Ok(response)) => {
            let disabled = response.into_inner().disabled;
            tracing::info!(channel, disabled = disabled.contains(&channel), "channel health reported");
        }
        Ok(Err(status)) => tracing::warn!(channel, %status, "channel health report refused"),
        Err(_) => tracing::warn!(channel, "channel health report timed out"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn every_fifth_consecutive_failure_is_reported_and_success_resets() {
        let health = Health::unreported();
        let bad_gateway = ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message: String::new() };
        for _ in 0..4 {
            assert!(health.count("a", &bad_gateway).is_none());
        }
        health.succeeded("a");
        assert_eq!(health.failures("a"), 0);
        for _ in 0..4 {
            assert!(health.count("a", &ProxyError::UpstreamConnect).is_none());
        }
        let report = health.count("a", &bad_gateway).unwrap();
        assert_eq!(report.channel_id, "a");
        assert_eq!(report.consecutive_failures, AUTO_DISABLE_AFTER);
        assert_eq!(report.last_status, 502);
        assert_eq!(report.reason, "upstream_status");
        assert_eq!(health.failures("a"), 0, "the count restarts after a report");
    }

    #[test]
    fn client_mistakes_do_not_count_against_a_channel() {
        let health = Health::unreported();
        let bad_request = ProxyError::UpstreamStatus { status: StatusCode::BAD_REQUEST, message: String::new() };
        for _ in 0..10 {
            assert!(health.count("a", &bad_request).is_none());
        }
        assert_eq!(health.failures("a"), 0);
        health.count("b", &ProxyError::UpstreamTimeout);
        assert_eq!((health.failures("a"), health.failures("b")), (0, 1));
    }
}
