//! One upstream attempt for each pairing of client dialect and channel type
//! that needs more than the chat passthrough in `proxy`:
//!
//! | client | channel | what happens |
//! |---|---|---|
//! | messages | `anthropic` | body and answer pass through (`model` mapped) |
//! | messages | `openai` | translated to chat completions and back |
//! | chat | `anthropic` | translated to messages and back |
//!
//! Calls to a messages-native channel carry its key as `x-api-key`, the
//! client's `anthropic-version` (or `compat-version`, else
//! [`DEFAULT_VERSION`]) and the client's other `anthropic-…` and vendor
//! `x-…` headers, never the client's own key.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::Response,
};
use bytes::Bytes;
use serde_json::Value;

use super::relay::{self, ChatAsMessages, MessagesAsChat, PassMessages, Relay};
use crate::{
    domain::Channel,
    error::ProxyError,
    now_unix, openai,
    openai::ChatRequest,
    proxy,
    server::App,
    translate::{self, TranslateError},
    upstream,
    usage::{Charge, Meter},
};

/// `anthropic-version` sent when the client named none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// Client headers never passed to an upstream: credentials and what
/// describes the hop to the gateway rather than the request.
const HOP_HEADERS: &[&str] = &["x-api-key", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"];

/// A `/v1/messages` request as the client sent it.
pub struct MessagesCall {
    /// The body as it arrived.
    pub raw: Bytes,
    /// The same body parsed (for translation and the model mapping).
    pub json: Value,
    pub model: String,
    pub stream: bool,
    /// The client's headers, passed on to messages-native channels.
    pub headers: HeaderMap,
    /// The query string, passed on to messages-native channels.
    pub query: Option<String>,
}

/// Sends `call` to `channel` in the channel's dialect and answers in the
/// messages dialect; metered like chat.
pub async fn messages(
    app: &App,
    channel: Arc<Channel>,
    call: &MessagesCall,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let upstream_model = channel.upstream_model(&call.model).to_owned();
    match channel.kind {
        crate::domain::ChannelKind::Anthropic => {
            let body =
                if upstream_model == call.model { call.raw.clone() } else { with_model(&call.json, &upstream_model)? };
            let path = match &call.query {
                Some(query) => format!("/messages?{query}"),
                None => "/messages".to_owned(),
            };
            let headers = anthropic_headers(&call.headers);
            let response = app.upstreams.send(&channel, &path, headers, body, call.stream).await?;
            let response = success(response, &channel).await?;
            let mut meter = Meter::new(charge, app.usage.clone(), call.raw.len());
            meter.estimate_prompt_from(call.raw.clone());
            if is_sse(&response) {
                return Ok(stream(app, &channel, response, PassMessages::default(), meter));
            }
            let (bytes, mut meter) = read(app, &channel, response, meter).await?;
            if let Some(usage) = translate::messages_body_usage(&bytes) {
                meter.observe(usage);
            } else if let Ok(answer) = serde_json::from_slice::<Value>(&bytes) {
                meter.add_text(&messages_text(&answer));
            }
            meter.finish(200);
            Ok(proxy::build(StatusCode::OK, None, Body::from(bytes), false))
        }
        crate::domain::ChannelKind::OpenAi => {
            let mut request = translate::messages_to_chat_request(&call.json).map_err(untranslatable)?;
            request["model"] = Value::String(upstream_model);
            let body = Bytes::from(request.to_string());
            let response = app.upstreams.chat(&channel, body, call.stream).await?;
            let response = success(response, &channel).await?;
            let mut meter = Meter::new(charge, app.usage.clone(), call.raw.len());
            meter.estimate_prompt_from(call.raw.clone());
            if is_sse(&response) {
                return Ok(stream(app, &channel, response, ChatAsMessages::new(), meter));
            }
            let (bytes, mut meter) = read(app, &channel, response, meter).await?;
            let Ok(completion) = serde_json::from_slice::<Value>(&bytes) else {
                return Err(not_json(meter, &channel));
            };
            if let Some(usage) = openai::response_usage(&bytes) {
                meter.observe(usage);
            }
            let answer = translate::chat_to_messages_response(&completion);
            meter.add_text(&messages_text(&answer));
            meter.finish(200);
            Ok(json_response(&answer))
        }
    }
}

/// Sends the chat request `chat` to the messages-native `channel`,
/// translated, and answers in the chat dialect; metered like chat.
pub async fn chat(
    app: &App,
    channel: Arc<Channel>,
    chat: &ChatRequest,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let json = serde_json::from_slice::<Value>(chat.body()).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    let mut request = translate::chat_to_messages_request(&json).map_err(untranslatable)?;
    request["model"] = Value::String(channel.upstream_model(&chat.model).to_owned());
    let body = Bytes::from(request.to_string());
    let response =
        app.upstreams.send(&channel, "/messages", anthropic_headers(&HeaderMap::new()), body, chat.stream).await?;
    let response = success(response, &channel).await?;
    let mut meter = Meter::new(charge, app.usage.clone(), chat.len());
    meter.estimate_prompt_from(chat.body().clone());
    if is_sse(&response) {
        let relay = MessagesAsChat::new(chat.client_wants_usage, now_unix());
        return Ok(stream(app, &channel, response, relay, meter));
    }
    let (bytes, mut meter) = read(app, &channel, response, meter).await?;
    let Ok(answer) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(not_json(meter, &channel));
    };
    match translate::messages_body_usage(&bytes) {
        Some(usage) => meter.observe(usage),
        None => meter.add_text(&messages_text(&answer)),
    }
    meter.finish(200);
    Ok(json_response(&translate::messages_to_chat_response(&answer, now_unix())))
}

/// The headers for a messages-native upstream: JSON content, the version,
/// and the client's `anthropic-…` and vendor `x-…` headers.
pub fn anthropic_headers(client: &HeaderMap) -> HeaderMap {
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

/// `body` with `model` replaced; every other field kept.
fn with_model(body: &Value, model: &str) -> Result<Bytes, ProxyError> {
    let mut body = body.clone();
    let object = body.as_object_mut().ok_or(ProxyError::MissingField("model"))?;
    object.insert("model".into(), Value::String(model.to_owned()));
    Ok(Bytes::from(body.to_string()))
}

fn untranslatable(error: TranslateError) -> ProxyError {
    ProxyError::Untranslatable(error.to_string())
}

/// `response` when its status is a success, else the masked upstream error.
async fn success(response: reqwest::Response, channel: &Channel) -> Result<reqwest::Response, ProxyError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let bytes = proxy::read_capped(response, proxy::MAX_ERROR_BODY_BYTES).await;
    let message = upstream::mask_channel(&openai::upstream_error_message(status, &bytes), channel);
    tracing::warn!(channel = %channel.id, status = status.as_u16(), %message, "upstream refused the request");
    Err(ProxyError::UpstreamStatus { status, message })
}

fn is_sse(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The streamed client response for `response` sent through `relay`.
fn stream<R: Relay>(app: &App, channel: &Channel, response: reqwest::Response, relay: R, meter: Meter) -> Response {
    let idle = app.upstreams.idle_timeout(channel);
    let body = relay::relayed(Box::pin(response.bytes_stream()), relay, meter, idle);
    proxy::build(StatusCode::OK, None, Body::from_stream(body), true)
}

/// The whole body; a body that breaks off bills nothing and may be retried.
/// (The meter is live while reading, so a client that leaves is billed.)
async fn read(
    app: &App,
    channel: &Channel,
    response: reqwest::Response,
    meter: Meter,
) -> Result<(Bytes, Meter), ProxyError> {
    match app.upstreams.read_body(channel, response).await {
        Ok(bytes) => Ok((bytes, meter)),
        Err(error) => {
            meter.cancel();
            Err(error)
        }
    }
}

fn not_json(meter: Meter, channel: &Channel) -> ProxyError {
    meter.cancel();
    tracing::warn!(channel = %channel.id, "upstream answered with a body that is not JSON");
    ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message: "upstream answer is not JSON".into() }
}

fn json_response(value: &Value) -> Response {
    proxy::build(StatusCode::OK, None, Body::from(value.to_string()), false)
}

/// The text and tool arguments of a messages answer, for estimates.
fn messages_text(answer: &Value) -> String {
    let mut text = String::new();
    for block in answer.get("content").and_then(Value::as_array).into_iter().flatten() {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            text.push_str(t);
        }
        if let Some(input) = block.get("input") {
            text.push_str(&input.to_string());
        }
    }
    text
}
