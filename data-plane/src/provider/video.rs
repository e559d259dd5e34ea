//! A channel's video API, on the shared transport with its configured
//! timeouts: the submission (`POST {base}/videos`, a streamed multipart
//! body) and the download (`GET {base}/videos/{id}/content`, redirects
//! followed; the body then goes through the streaming pump). Failures
//! become `ProxyError`s free of keys and addresses.

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use super::Upstreams;
use crate::{error::ProxyError, policy::domain::Channel};

/// Largest submission answer read.
const MAX_ANSWER_BODY: usize = 1 << 20;

/// Submits `body` (multipart under `boundary`) to `channel`; the
/// upstream's task object on success.
pub async fn submit(
    upstreams: &Upstreams,
    channel: &Channel,
    boundary: &str,
    body: super::client::Payload,
) -> Result<serde_json::Map<String, Value>, ProxyError> {
    let mut headers = HeaderMap::new();
    let content_type = HeaderValue::from_str(&format!("multipart/form-data; boundary={boundary}"))
        .map_err(|_| ProxyError::Internal)?;
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let response = upstreams.request(channel, Method::POST, "/videos", headers, body, false).await?;
    let response = super::accept(upstreams, channel, response).await?;
    let bytes = super::read_capped(response, MAX_ANSWER_BODY).await;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(answer)) if answer.get("id").is_some_and(|id| id.is_string() || id.is_number()) => Ok(answer),
        _ => {
            tracing::warn!(channel = %channel.id, "upstream answered a video submission without a task id");
            let message = "the upstream's answer is not a video task".to_owned();
            Err(ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message })
        }
    }
}

/// Starts downloading the content of upstream task `upstream_id`; the
/// response once its headers arrived (after any redirects).
pub async fn content(
    upstreams: &Upstreams,
    channel: &Channel,
    upstream_id: &str,
    variant: Option<&str>,
) -> Result<super::client::Response, ProxyError> {
    let mut path = format!("/videos/{}/content", path_segment(upstream_id));
    if let Some(variant) = variant {
        path.push_str("?variant=");
        path.push_str(variant);
    }
    let response =
        upstreams.request(channel, Method::GET, &path, HeaderMap::new(), super::client::Payload::empty(), true).await?;
    super::accept(upstreams, channel, response).await
}

/// `id` made safe for one URL path segment.
pub fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
