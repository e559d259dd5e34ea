//! What a Gemini API (`gemini`) channel expects: the base URL
//! `https://generativelanguage.googleapis.com/v1beta`, models at
//! `/models/<model>:<method>` (`generateContent`, `streamGenerateContent`
//! with `alt=sse`, `countTokens`, `embedContent`) and the key as
//! `x-goog-api-key`.

use axum::http::{HeaderName, HeaderValue};

use crate::{error::ProxyError, policy::domain::Channel};

/// The path of `method` on `model` (`stream` asks for SSE).
pub fn path(model: &str, method: &str, stream: bool) -> String {
    if stream { format!("/models/{model}:{method}?alt=sse") } else { format!("/models/{model}:{method}") }
}

/// The method that answers a chat request, streamed or whole.
pub fn generate_method(stream: bool) -> &'static str {
    if stream { "streamGenerateContent" } else { "generateContent" }
}

/// The channel's key as `x-goog-api-key`.
pub fn credential(channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    Ok((HeaderName::from_static("x-goog-api-key"), super::secret(channel, &channel.api_key)?))
}
