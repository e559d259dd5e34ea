//! What a messages-native (`anthropic`) channel expects: messages at
//! `/messages`, its key as `x-api-key`,
//! JSON content, an `anthropic-version` (the client's, else
//! [`DEFAULT_VERSION`]), and the client's other `anthropic-…` and vendor
//! `x-…` headers passed on unchanged, never the client's own key or the
//! headers that describe the hop to the gateway.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::{error::ProxyError, policy::domain::Channel};

/// Where messages go under the channel's base URL.
pub const MESSAGES_PATH: &str = "/messages";
/// Where token counts go under the channel's base URL.
pub const COUNT_TOKENS_PATH: &str = "/messages/count_tokens";

/// `anthropic-version` sent when the client named none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// Client headers never passed to an upstream: credentials and what
/// describes the hop to the gateway rather than the request.
const HOP_HEADERS: &[&str] = &["x-api-key", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"];

/// The headers for a messages-native upstream, from the `client`'s.
pub fn headers(client: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in client {
        let n = name.as_str();
        if (n.starts_with("anthropic-") || n.starts_with("x-")) && !HOP_HEADERS.contains(&n) {
            headers.append(name.clone(), value.clone());
        }
    }
    if !headers.contains_key("anthropic-version") {
        let version = client.get("compat-version").cloned().unwrap_or(HeaderValue::from_static(DEFAULT_VERSION));
        headers.insert(HeaderName::from_static("anthropic-version"), version);
    }
    headers
}

/// The channel's key as this kind of upstream takes it: `x-api-key`.
pub fn credential(channel: &Channel) -> Result<(HeaderName, HeaderValue), ProxyError> {
    Ok((HeaderName::from_static("x-api-key"), super::secret(channel, &channel.api_key)?))
}

/// `path` under the channel's base URL with the client's `query`, if any.
pub fn path_with_query(path: &str, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    }
}
