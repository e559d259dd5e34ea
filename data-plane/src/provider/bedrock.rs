//! What an AWS Bedrock (`bedrock`) channel expects. Not written yet:
//! SigV4 signing, the paths and the event-stream framing come next.

use axum::http::HeaderName;

use super::{ChatCall, Framing, Outgoing};
use crate::translate::Dialect;
use crate::{error::ProxyError, policy::domain::Channel};

/// `anthropic_version` of messages bodies sent to `invoke`.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// Signs `request` for `channel`.
pub fn authorize(channel: &Channel, request: Outgoing<'_>) -> Result<HeaderName, ProxyError> {
    let _ = request;
    tracing::error!(channel = %channel.id, "bedrock channels are not served yet");
    Err(ProxyError::UpstreamConnect)
}

/// The call for `upstream_model`: Anthropic models (`anthropic.…`, with or
/// without a region prefix) through `invoke` in the messages dialect, the
/// rest through `converse`.
pub fn chat_call(channel: &Channel, upstream_model: &str, stream: bool) -> ChatCall {
    let _ = channel;
    let (dialect, method) = match (upstream_model.contains("anthropic."), stream) {
        (true, false) => (Dialect::Messages, "invoke"),
        (true, true) => (Dialect::Messages, "invoke-with-response-stream"),
        (false, false) => (Dialect::Converse, "converse"),
        (false, true) => (Dialect::Converse, "converse-stream"),
    };
    ChatCall { dialect, path: format!("/model/{upstream_model}/{method}"), framing: Framing::EventStream }
}

/// An AWS event stream (`application/vnd.amazon.eventstream`) read frame by
/// frame, each event's payload handed to the event relay `R` as if it were
/// one SSE event's data: an `invoke-with-response-stream` `chunk` as the
/// messages event its base64 `bytes` hold; a `converse-stream` event as
/// `{"<event type>": <payload>}`, the shape of Converse's stream union.
/// (Placeholder until the frame reader is written: passes nothing.)
pub struct Frames<R> {
    relay: R,
}

// === impl Frames ===

impl<R: crate::meter::pump::EventRelay> Frames<R> {
    pub fn new(relay: R) -> Frames<R> {
        Frames { relay }
    }
}

impl<R: crate::meter::pump::EventRelay> crate::meter::pump::Relay for Frames<R> {
    fn push(&mut self, _chunk: bytes::Bytes, _meter: Option<&mut crate::meter::Meter>) -> bytes::Bytes {
        bytes::Bytes::new()
    }

    fn finish(&mut self, meter: Option<&mut crate::meter::Meter>) -> bytes::Bytes {
        self.relay.finish(meter)
    }

    fn complete(&self) -> bool {
        self.relay.complete()
    }
}
