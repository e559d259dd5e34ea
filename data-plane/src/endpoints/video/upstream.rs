//! The data plane's two calls to a channel's video API: the submission
//! (`POST {base}/videos`, a streamed multipart body) and the download
//! (`GET {base}/videos/{id}/content`, redirects followed, streamed back
//! with an idle deadline). Failures become `ProxyError`s free of keys and
//! addresses.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::{
    domain::Channel,
    error::ProxyError,
    provider::{self, transport_error},
};

/// Defaults for channels that set no timeout of their own.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Submitting includes uploading the reference file.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(600);
/// Largest submission answer read.
const MAX_ANSWER_BODY: usize = 1 << 20;

/// Pooled HTTP client for channels' video APIs.
#[derive(Clone)]
pub struct VideoUpstream {
    http: reqwest::Client,
}

// === impl VideoUpstream ===

impl VideoUpstream {
    /// A client following up to 10 redirects (reqwest drops the
    /// `Authorization` header when one leaves the channel's host).
    pub fn new() -> anyhow::Result<VideoUpstream> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::limited(10))
            .build()?;
        Ok(VideoUpstream { http })
    }

    /// Submits `body` (multipart under `boundary`) to `channel`; the
    /// upstream's task object on success.
    pub async fn submit(
        &self,
        channel: &Channel,
        boundary: &str,
        body: reqwest::Body,
    ) -> Result<serde_json::Map<String, Value>, ProxyError> {
        let total = channel.timeouts.total.unwrap_or(SUBMIT_TIMEOUT).max(Duration::from_secs(60));
        let response = self
            .http
            .post(format!("{}/videos", channel.base_url))
            .header(header::AUTHORIZATION, authorization(channel)?)
            .header(header::CONTENT_TYPE, format!("multipart/form-data; boundary={boundary}"))
            .header(header::ACCEPT, "application/json")
            .timeout(total)
            .body(body)
            .send()
            .await
            .map_err(|error| transport_error(channel, &error))?;
        let status = response.status();
        if !status.is_success() {
            return Err(refusal(channel, status, response).await);
        }
        let bytes = provider::read_capped(response, MAX_ANSWER_BODY).await;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(answer)) if answer.get("id").is_some_and(|id| id.is_string() || id.is_number()) => {
                Ok(answer)
            }
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
        &self,
        channel: &Channel,
        upstream_id: &str,
        variant: Option<&str>,
    ) -> Result<reqwest::Response, ProxyError> {
        let mut url = format!("{}/videos/{}/content", channel.base_url, path_segment(upstream_id));
        if let Some(variant) = variant {
            url.push_str("?variant=");
            url.push_str(variant);
        }
        let first_byte = channel.timeouts.first_byte.unwrap_or(Duration::from_secs(60));
        let send = self.http.get(url).header(header::AUTHORIZATION, authorization(channel)?).send();
        let response = match tokio::time::timeout(first_byte, send).await {
            Ok(result) => result.map_err(|error| transport_error(channel, &error))?,
            Err(_) => return Err(ProxyError::UpstreamTimeout),
        };
        let status = response.status();
        if !status.is_success() {
            return Err(refusal(channel, status, response).await);
        }
        Ok(response)
    }
}

fn authorization(channel: &Channel) -> Result<HeaderValue, ProxyError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", channel.api_key)).map_err(|_| {
        tracing::error!(channel = %channel.id, "channel api key is not a valid header value");
        ProxyError::UpstreamConnect
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// The client-facing error for an upstream's non-2xx answer.
async fn refusal(channel: &Channel, status: reqwest::StatusCode, response: reqwest::Response) -> ProxyError {
    let bytes = provider::read_capped(response, provider::MAX_ERROR_BODY_BYTES).await;
    let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let message = provider::error_message(status, &bytes, channel);
    tracing::warn!(channel = %channel.id, status = status.as_u16(), %message, "upstream refused a video request");
    ProxyError::UpstreamStatus { status, message }
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
