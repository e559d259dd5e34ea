//! What a Vertex AI (`vertex`) channel expects. Not written yet: the
//! service-account token exchange and the model paths come next.

use axum::http::{HeaderName, HeaderValue};

use super::{ChatCall, Framing, Upstreams, gemini};
use crate::translate::Dialect;
use crate::{error::ProxyError, policy::domain::Channel};

/// `anthropic_version` of messages bodies sent to `rawPredict`.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The bearer token for `channel`'s service account.
pub async fn credential(upstreams: &Upstreams, channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    let _ = upstreams;
    tracing::error!(channel = %channel.id, "vertex channels are not served yet");
    Err(ProxyError::UpstreamConnect)
}

/// The call for `upstream_model`: Anthropic models (`claude-…`) through
/// `rawPredict` in the messages dialect, the rest as Gemini models.
pub fn chat_call(channel: &Channel, upstream_model: &str, stream: bool) -> ChatCall {
    let _ = channel;
    if upstream_model.starts_with("claude") {
        let method = if stream { "streamRawPredict" } else { "rawPredict" };
        let path = format!("/publishers/anthropic/models/{upstream_model}:{method}");
        return ChatCall { dialect: Dialect::Messages, path, framing: Framing::Sse };
    }
    let path = format!("/publishers/google{}", gemini::path(upstream_model, gemini::generate_method(stream), stream));
    ChatCall { dialect: Dialect::Gemini, path, framing: Framing::Sse }
}
