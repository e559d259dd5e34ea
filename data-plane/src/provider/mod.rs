//! Upstream providers: one adapter module per channel kind (`openai`,
//! `anthropic`, `azure`, `bedrock`, `vertex`, `gemini`: paths, how the key is sent, the headers a kind expects), the
//! transport that sends (pooled clients, timeouts), channel health, the
//! video API, and what every attempt does with an upstream's status: a
//! success goes on to metering, anything else becomes one `ProxyError` whose
//! message is masked of the channel's key and address before it is cut to
//! length. `dialect` prepares bodies (passthrough, model mapping,
//! translation through `translate`) and picks the relay for each pairing of
//! client dialect and channel kind.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod client;
pub mod dialect;
pub mod gemini;
mod health;
mod keys;
pub mod openai;
pub mod realtime;
mod transport;
pub mod vertex;
pub mod video;

pub use self::{
    health::{ChannelFailure, FailureReports, Health},
    transport::{Config, Upstreams, mask_channel},
};

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;

use crate::{
    error::ProxyError,
    json_body::BodyEdit,
    policy::domain::{Channel, ChannelKind},
    translate::Dialect,
};

/// What an attempt needs besides its request: the transport and where usage
/// goes.
#[derive(Clone, Copy)]
pub struct Attempt<'a> {
    pub upstreams: &'a Upstreams,
    pub usage: &'a crate::meter::UsageSink,
}

/// Most of an upstream error body read to find its message.
pub const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
/// Longest upstream error message passed on to the client.
const MAX_UPSTREAM_MESSAGE: usize = 1000;

/// Where chat completions go on an OpenAI-shaped channel (`openai`,
/// `azure`) for `upstream_model`, query included.
pub fn chat_path(channel: &Channel, upstream_model: &str) -> std::borrow::Cow<'static, str> {
    match channel.kind {
        ChannelKind::Azure => azure::path(channel, upstream_model, openai::CHAT_PATH).into(),
        _ => openai::CHAT_PATH.into(),
    }
}

/// How a chat-like call is made on a channel: the dialect its body is in,
/// where it goes and how its stream is framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatCall {
    pub dialect: Dialect,
    /// Under the channel's base URL, query included.
    pub path: String,
    pub framing: Framing,
}

/// How an upstream frames a streamed answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events.
    Sse,
    /// AWS's binary event stream (`application/vnd.amazon.eventstream`).
    EventStream,
}

/// The call for a chat-like request for `upstream_model` on `channel`
/// (`stream`: the answer is streamed), by the kind's adapter.
pub fn chat_call(channel: &Channel, upstream_model: &str, stream: bool) -> ChatCall {
    match channel.kind {
        ChannelKind::OpenAi | ChannelKind::Azure => ChatCall {
            dialect: Dialect::Chat,
            path: chat_path(channel, upstream_model).into_owned(),
            framing: Framing::Sse,
        },
        ChannelKind::Anthropic => {
            ChatCall { dialect: Dialect::Messages, path: anthropic::MESSAGES_PATH.into(), framing: Framing::Sse }
        }
        ChannelKind::Gemini => ChatCall {
            dialect: Dialect::Gemini,
            path: gemini::path(upstream_model, gemini::generate_method(stream), stream),
            framing: Framing::Sse,
        },
        ChannelKind::Vertex => vertex::chat_call(channel, upstream_model, stream),
        ChannelKind::Bedrock => bedrock::chat_call(channel, upstream_model, stream),
    }
}

/// What `channel`'s adapter changes in a chat-like body of `call`'s
/// dialect for `upstream_model`, whether the body passed through or was
/// translated: the model named in the body (or left out where the path
/// names it), and the version fields Bedrock and Vertex want for messages
/// bodies. `client` holds the client's headers (Bedrock takes
/// `anthropic-beta` in the body).
pub fn body_edit(channel: &Channel, call: &ChatCall, upstream_model: &str, client: &HeaderMap) -> BodyEdit {
    let mut edit = BodyEdit::default();
    match (channel.kind, call.dialect) {
        (ChannelKind::Bedrock, Dialect::Messages) => {
            edit.drop.extend(["model", "stream"]);
            edit.set_str("anthropic_version", bedrock::ANTHROPIC_VERSION);
            let betas: Vec<&str> = client
                .get_all("anthropic-beta")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|b| !b.is_empty())
                .collect();
            if !betas.is_empty() {
                edit.set.push(("anthropic_beta", serde_json::json!(betas).to_string()));
            }
        }
        (ChannelKind::Vertex, Dialect::Messages) => {
            edit.drop.push("model");
            edit.set_str("anthropic_version", vertex::ANTHROPIC_VERSION);
        }
        // The model is in the path; Converse and Gemini bodies name none.
        (_, Dialect::Gemini | Dialect::Converse) => edit.drop.push("model"),
        _ => edit.set_str("model", upstream_model),
    }
    edit
}

/// One request about to be sent, as an adapter sees it to authorize it.
pub struct Outgoing<'a> {
    pub method: &'a axum::http::Method,
    pub uri: &'a axum::http::Uri,
    pub headers: &'a mut HeaderMap,
    /// The body when it is whole (SigV4 signs its hash); `None` for a
    /// streamed upload.
    pub body: Option<&'a Bytes>,
}

/// Puts `channel`'s credential on `request` as its kind's adapter sends it
/// (a key header, a bearer token, a signature); returns the header that
/// carries it, removed when a redirect leaves the channel's host.
pub async fn authorize(
    upstreams: &Upstreams,
    channel: &Channel,
    request: Outgoing<'_>,
) -> Result<axum::http::HeaderName, ProxyError> {
    let (name, value) = match channel.kind {
        ChannelKind::OpenAi => openai::credential(channel)?,
        ChannelKind::Anthropic => anthropic::credential(channel)?,
        ChannelKind::Azure => azure::credential(channel)?,
        ChannelKind::Gemini => gemini::credential(channel)?,
        ChannelKind::Vertex => vertex::credential(upstreams, channel).await?,
        ChannelKind::Bedrock => return bedrock::authorize(channel, request),
    };
    request.headers.insert(name.clone(), value);
    Ok(name)
}

/// `value` as a header value marked sensitive (never logged by the HTTP
/// stack); a key that cannot be one fails the attempt.
fn secret(channel: &Channel, value: &str) -> Result<axum::http::HeaderValue, ProxyError> {
    let mut value = axum::http::HeaderValue::from_str(value).map_err(|_| {
        tracing::error!(channel = %channel.id, "channel api key is not a valid header value");
        ProxyError::UpstreamConnect
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// `response` when its status is a success. Otherwise the upstream's refusal
/// as `ProxyError::UpstreamStatus` (logged), with its message masked; a 429
/// also cools `channel` down for its `Retry-After`.
pub async fn accept(
    upstreams: &Upstreams,
    channel: &Channel,
    response: client::Response,
) -> Result<client::Response, ProxyError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        let retry_after = retry_after(response.headers());
        if channel.is_pooled() {
            upstreams.health.keys.throttled(&channel.id, &channel.key_id, retry_after);
        } else {
            upstreams.health.throttled(&channel.id, retry_after);
        }
    }
    if channel.kind == ChannelKind::Vertex && status == StatusCode::UNAUTHORIZED {
        // The access token, not the service account, was refused (tokens
        // are renewed well before they expire, so it was revoked): the next
        // call exchanges a new one, and this attempt moves on.
        upstreams.vertex_tokens.forget(channel);
        tracing::warn!(channel = %channel.id, "vertex refused the access token; a new one will be exchanged");
        return Err(ProxyError::UpstreamConnect);
    }
    let bytes = read_capped(response, MAX_ERROR_BODY_BYTES).await;
    let status = key_refusal(channel, status, &bytes);
    let message = error_message(status, &bytes, channel);
    tracing::warn!(channel = %channel.id, status = status.as_u16(), %message, "upstream refused the request");
    Err(ProxyError::UpstreamStatus { status, message })
}

/// Headers of a JSON request body, the start of most upstream calls' own.
pub fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    headers
}

/// `status`, or 401 where the upstream refused the channel's key under
/// another status: Google's APIs answer a bad key with 400
/// `API_KEY_INVALID`, and a refused key must count as one (its pool moves
/// on, the control plane hears of it).
fn key_refusal(channel: &Channel, status: StatusCode, body: &[u8]) -> StatusCode {
    let google = matches!(channel.kind, ChannelKind::Gemini | ChannelKind::Vertex);
    if google && status == StatusCode::BAD_REQUEST && body.windows(15).any(|w| w == b"API_KEY_INVALID") {
        StatusCode::UNAUTHORIZED
    } else {
        status
    }
}

/// A client response: `status`, the upstream's content type (else JSON or
/// SSE), and for streams the headers that keep proxies from buffering.
pub fn reply(
    status: StatusCode,
    content_type: Option<axum::http::HeaderValue>,
    body: axum::body::Body,
    streaming: bool,
) -> axum::response::Response {
    use axum::http::HeaderValue;
    let mut response = axum::response::Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let default_type = if streaming { "text/event-stream" } else { "application/json" };
    headers.insert(header::CONTENT_TYPE, content_type.unwrap_or(HeaderValue::from_static(default_type)));
    if streaming {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Tells nginx-style proxies in front of us not to buffer the stream.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
    response
}

/// Whether `headers` announce an SSE stream.
pub fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The first `cap` bytes of `response`'s body (fewer if it fails midway).
pub async fn read_capped(response: client::Response, cap: usize) -> Bytes {
    let mut buf = BytesMut::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() >= cap {
            break;
        }
    }
    buf.freeze()
}

/// A `Retry-After` in seconds or as an HTTP date (`retry-after-ms` too),
/// if the upstream sent one.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| text(name)?.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0);
    let date = || {
        let at = httpdate::parse_http_date(text("retry-after")?).ok()?;
        Some(at.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO))
    };
    number("retry-after-ms")
        .map(|ms| Duration::from_millis(ms as u64))
        .or_else(|| number("retry-after").map(|s| Duration::from_secs_f64(s.min(86_400.0))))
        .or_else(date)
}

/// The message to show for an upstream's non-2xx answer `body`: its
/// `error.message` (or a string `error`/`message`) when the body is JSON,
/// else the status reason; masked of `channel`'s secrets first, then cut to
/// `MAX_UPSTREAM_MESSAGE` bytes, so no part of a key survives the cut.
pub fn error_message(status: StatusCode, body: &[u8], channel: &Channel) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| {
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        v.get("error")
            .and_then(|e| e.get("message").and_then(text).or_else(|| text(e)))
            .or_else(|| v.get("message").and_then(text))
    });
    let message = from_json
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("unknown status").to_owned());
    let mut message = mask_channel(&message, channel);
    if message.len() > MAX_UPSTREAM_MESSAGE {
        let mut cut = MAX_UPSTREAM_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_key_across_the_length_cut_is_masked_whole() {
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        channel.api_key = "sk-upstream-secret-0123456789".into();
        for pad in 980..1000 {
            let text = format!("{}{}", "x".repeat(pad), channel.api_key);
            let body = serde_json::json!({ "error": { "message": text } }).to_string();
            let message = error_message(StatusCode::UNAUTHORIZED, body.as_bytes(), &channel);
            assert!(message.len() <= MAX_UPSTREAM_MESSAGE);
            assert!(!message.contains("sk-up"), "pad {pad}: {}", &message[pad.min(message.len())..]);
        }
    }

    #[test]
    fn messages_come_from_either_error_shape_or_the_status() {
        let channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        let openai = br#"{"error":{"message":"bad thing","type":"x"}}"#;
        assert_eq!(error_message(StatusCode::BAD_REQUEST, openai, &channel), "bad thing");
        let messages = br#"{"type":"error","error":{"type":"x","message":"overloaded"}}"#;
        assert_eq!(error_message(StatusCode::SERVICE_UNAVAILABLE, messages, &channel), "overloaded");
        assert_eq!(error_message(StatusCode::BAD_GATEWAY, b"<html>", &channel), "Bad Gateway");
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
    }

    #[test]
    fn retry_after_reads_an_http_date() {
        let mut headers = HeaderMap::new();
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        headers.insert("retry-after", httpdate::fmt_http_date(later).parse().unwrap());
        let wait = retry_after(&headers).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120), "{wait:?}");
        headers.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::ZERO), "a date past is now");
        headers.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
