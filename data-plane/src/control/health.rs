//! Channel health reports to the control plane (`ReportChannelHealth`),
//! which takes a channel or key out of rotation for every data plane. Each
//! report goes out from its own task with a deadline; a lost one is made
//! again after the next run of failures.

use std::time::Duration;

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};

use super::ControlPlane;
use crate::provider::{ChannelFailure, FailureReports};

/// Longest a health report may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Reports channel failures to the control plane as one node.
pub struct HealthReports {
    control: ControlPlane,
    node_id: String,
}

// === impl HealthReports ===

impl HealthReports {
    /// Reports to `control` as node `node_id`.
    pub fn new(control: ControlPlane, node_id: &str) -> HealthReports {
        HealthReports { control, node_id: node_id.to_owned() }
    }
}

impl FailureReports for HealthReports {
    fn report(&self, failure: ChannelFailure) {
        let failure = pb::ChannelFailure {
            channel_id: failure.channel_id,
            consecutive_failures: failure.consecutive_failures,
            last_status: failure.last_status,
            reason: failure.reason,
            key_id: failure.key_id,
        };
        tokio::spawn(report(self.control.clone(), self.node_id.clone(), failure));
    }
}

async fn report(control: ControlPlane, node_id: String, failure: pb::ChannelFailure) {
    let channel = failure.channel_id.clone();
    let mut client = PolicyServiceClient::new(control.channel());
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
