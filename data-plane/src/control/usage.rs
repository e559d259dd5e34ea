//! Usage reports to the control plane (`ReportUsage`): records sent as the
//! bytes the spool wrote for them, never encoded again. The control plane
//! applies a record once per request id, so a report may be sent again.

use std::time::Duration;

use bytes::Bytes;
use gw_proto::pb;

use super::{ControlPlane, is_retryable};

/// What the control plane made of a usage report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub applied: u32,
    pub duplicates: u32,
    /// Records it refused and logged (sending them again would not help).
    pub refused: u32,
}

/// Why a usage report was not acknowledged; the text is the call's status.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The control plane judged the batch malformed: it is never resent.
    #[error("{0}")]
    Refused(String),
    /// The call failed in a way a later report may not.
    #[error("{0}")]
    Failed(String),
}

/// Reports `records` (each a `gateway.v1.UsageRecord` as the spool encoded
/// it) as node `node_id`, with a deadline of `timeout` on the control plane.
pub async fn report_usage(
    control: &ControlPlane,
    node_id: &str,
    records: Vec<Bytes>,
    timeout: Duration,
) -> Result<Reported, ReportError> {
    let mut request = control.request(pb::EncodedUsageReport { node_id: node_id.to_owned(), records });
    request.set_timeout(timeout);
    match gw_proto::report_encoded_usage(control.channel(), request).await {
        Ok(response) => {
            let response = response.into_inner();
            Ok(Reported { applied: response.applied, duplicates: response.duplicates, refused: response.refused })
        }
        Err(status) if !is_retryable(&status) => Err(ReportError::Refused(status.to_string())),
        Err(status) => Err(ReportError::Failed(status.to_string())),
    }
}
