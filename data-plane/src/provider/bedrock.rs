//! What an AWS Bedrock (`bedrock`) channel expects. Not written yet:
//! SigV4 signing, the paths and the event-stream framing come next.

use axum::http::HeaderName;

use super::Outgoing;
use crate::{error::ProxyError, policy::domain::Channel};

/// Signs `request` for `channel`.
pub fn authorize(channel: &Channel, request: Outgoing<'_>) -> Result<HeaderName, ProxyError> {
    let _ = request;
    tracing::error!(channel = %channel.id, "bedrock channels are not served yet");
    Err(ProxyError::UpstreamConnect)
}
