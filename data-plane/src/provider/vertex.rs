//! What a Vertex AI (`vertex`) channel expects. Not written yet: the
//! service-account token exchange and the model paths come next.

use axum::http::{HeaderName, HeaderValue};

use super::Upstreams;
use crate::{error::ProxyError, policy::domain::Channel};

/// The bearer token for `channel`'s service account.
pub async fn credential(upstreams: &Upstreams, channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    let _ = upstreams;
    tracing::error!(channel = %channel.id, "vertex channels are not served yet");
    Err(ProxyError::UpstreamConnect)
}
