//! What a Gemini API (`gemini`) channel expects: the base URL
//! `https://generativelanguage.googleapis.com/v1beta`, models at
//! `/models/<model>:<method>` (`generateContent`, `streamGenerateContent`
//! with `alt=sse`, `countTokens`, `embedContent`) and
//! the key as `x-goog-api-key` (never in the query, where it would reach
//! logs). Vertex AI serves the same methods under `publishers/google`.

use axum::http::{HeaderName, HeaderValue};

use crate::{error::ProxyError, policy::domain::Channel};

/// The path of `method` on `model` (`stream` asks for SSE). A model given
/// as a resource name (`models/gemini-…`) is named once.
pub fn path(model: &str, method: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if stream { format!("/models/{model}:{method}?alt=sse") } else { format!("/models/{model}:{method}") }
}

/// The method that answers a chat request, streamed or whole.
pub fn generate_method(stream: bool) -> &'static str {
    if stream { "streamGenerateContent" } else { "generateContent" }
}

/// Where `countTokens` for `model` goes (a `generateContent` body, or
/// `{"contents": …}`, answered with `totalTokens`).
pub fn count_tokens_path(model: &str) -> String {
    path(model, "countTokens", false)
}

/// Where `embedContent` for `model` goes.
pub fn embed_path(model: &str) -> String {
    path(model, "embedContent", false)
}

/// The channel's key as `x-goog-api-key`.
pub fn credential(channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    Ok((HeaderName::from_static("x-goog-api-key"), super::secret(channel, &channel.api_key)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_named_after_the_model_and_streams_ask_for_sse() {
        assert_eq!(path("gemini-2.5-flash", generate_method(false), false), "/models/gemini-2.5-flash:generateContent");
        assert_eq!(
            path("models/gemini-2.5-flash", generate_method(true), true),
            "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(count_tokens_path("gemini-2.5-pro"), "/models/gemini-2.5-pro:countTokens");
        assert_eq!(embed_path("gemini-embedding-001"), "/models/gemini-embedding-001:embedContent");
    }
}
