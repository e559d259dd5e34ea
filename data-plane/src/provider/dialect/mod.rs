//! One upstream attempt for each pairing of client dialect and channel type
//! that needs more than the chat passthrough in `chat`, shared by the chat
//! and messages handlers (neither imports the other):
//!
//! | client | channel | what happens |
//! |---|---|---|
//! | messages | `anthropic` | body and answer pass through (`model` mapped) |
//! | messages | `openai` | translated to chat completions and back |
//! | chat | `anthropic` | translated to messages and back |
//!
//! Calls to a messages-native channel carry its key as `x-api-key`, the
//! client's `anthropic-version` (or `compat-version`, else
//! `provider::anthropic::DEFAULT_VERSION`) and the client's other `anthropic-…` and vendor
//! `x-…` headers, never the client's own key.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use bytes::Bytes;
use serde_json::Value;

mod forward;
mod relay;
pub mod through;

pub use self::forward::{ClientCall, forward};

use self::relay::{ChatAsMessages, MessagesAsChat, PassMessages};
use crate::{
    error::ProxyError,
    json_body::JsonBody,
    meter::{
        Charge, Meter, answer,
        pump::{EventRelay, Events, pump},
    },
    now_unix,
    openai::ChatRequest,
    policy::domain::{Channel, ChannelKind},
    provider::{self, Attempt, anthropic},
    translate::{self, TranslateError},
};

/// A `/v1/messages` request as the client sent it.
pub struct MessagesCall {
    /// The body as it arrived, fields in order.
    pub body: JsonBody,
    /// `max_tokens`, when given.
    pub max_tokens: Option<i64>,
    pub model: String,
    pub stream: bool,
    /// The client's headers, passed on to messages-native channels.
    pub headers: HeaderMap,
    /// The query string, passed on to messages-native channels.
    pub query: Option<String>,
}

// === impl MessagesCall ===

impl MessagesCall {
    /// The body parsed whole, for translation and counting: only those
    /// need it, so a request passed through never builds it. Fails only on
    /// JSON a parsed value refuses (a number past `f64`'s range).
    pub fn json(&self) -> Result<Value, ProxyError> {
        serde_json::from_slice(self.body.raw()).map_err(|e| ProxyError::InvalidJson(e.to_string()))
    }
}

/// Sends `call` to `channel` in the channel's dialect and answers in the
/// messages dialect; metered like chat.
pub async fn messages(
    app: Attempt<'_>,
    channel: Arc<Channel>,
    call: &MessagesCall,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let upstream_model = channel.upstream_model(&call.model).to_owned();
    let raw = call.body.raw().clone();
    match channel.kind {
        ChannelKind::Anthropic => {
            let body = body_for(call, &channel)?;
            let path = anthropic::path_with_query(anthropic::MESSAGES_PATH, call.query.as_deref());
            let headers = anthropic::headers(&call.headers);
            let response = app.upstreams.send(&channel, &path, headers, body, call.stream).await?;
            let response = provider::accept(app.upstreams, &channel, response).await?;
            let mut meter = Meter::new(charge, app.usage.clone(), raw.len());
            meter.estimate_prompt_from(raw);
            if provider::is_sse(response.headers()) {
                return Ok(stream(app, &channel, response, PassMessages::default(), meter));
            }
            let (bytes, mut meter) = read(app, &channel, response, meter).await?;
            meter.answered(&bytes);
            if let Some(usage) = answer::messages_body_usage(&bytes) {
                meter.observe(usage);
            } else if let Ok(answer) = serde_json::from_slice::<Value>(&bytes) {
                meter.add_text(&messages_text(&answer));
            }
            meter.finish(200).wait().await;
            Ok(super::reply(StatusCode::OK, None, Body::from(bytes), false))
        }
        ChannelKind::OpenAi | ChannelKind::Azure => {
            let (mut request, dropped) =
                translate::messages_to_chat_request_noted(&call.json()?).map_err(untranslatable)?;
            note_dropped(&dropped, "request");
            request["model"] = Value::String(upstream_model.clone());
            let body = Bytes::from(request.to_string());
            let response = app.upstreams.chat(&channel, &upstream_model, body, call.stream).await?;
            let response = provider::accept(app.upstreams, &channel, response).await?;
            let mut meter = Meter::new(charge, app.usage.clone(), raw.len());
            meter.estimate_prompt_from(raw);
            if provider::is_sse(response.headers()) {
                return Ok(stream(app, &channel, response, ChatAsMessages::new(), meter));
            }
            let (bytes, mut meter) = read(app, &channel, response, meter).await?;
            let Ok(completion) = serde_json::from_slice::<Value>(&bytes) else {
                return Err(not_json(meter, &channel));
            };
            meter.answered(&bytes);
            if let Some(usage) = answer::response_usage(&bytes) {
                meter.observe(usage);
            }
            let answer = translate::chat_to_messages_response(&completion);
            meter.add_text(&messages_text(&answer));
            meter.finish(200).wait().await;
            Ok(json_response(&answer))
        }
        ChannelKind::Bedrock | ChannelKind::Vertex | ChannelKind::Gemini => {
            let call = ClientCall {
                dialect: translate::Dialect::Messages,
                body: &call.body,
                model: &call.model,
                stream: call.stream,
                headers: &call.headers,
                query: call.query.as_deref(),
                answering: translate::Answering {
                    model: call.model.clone(),
                    created: now_unix(),
                    ..Default::default()
                },
            };
            forward(app, channel, &call, charge).await
        }
    }
}

/// Sends the chat request `chat` to the messages-native `channel`,
/// translated, and answers in the chat dialect; metered like chat.
pub async fn chat(
    app: Attempt<'_>,
    channel: Arc<Channel>,
    chat: &ChatRequest,
    charge: Charge,
) -> Result<Response, ProxyError> {
    if channel.kind != ChannelKind::Anthropic {
        let call = ClientCall {
            dialect: translate::Dialect::Chat,
            body: chat.json(),
            model: &chat.model,
            stream: chat.stream,
            headers: &HeaderMap::new(),
            query: None,
            answering: translate::Answering {
                model: chat.model.clone(),
                created: now_unix(),
                include_usage: chat.client_wants_usage,
                json_array: false,
            },
        };
        return forward(app, channel, &call, charge).await;
    }
    let json = serde_json::from_slice::<Value>(chat.body()).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    let (mut request, dropped) = translate::chat_to_messages_request_noted(&json).map_err(untranslatable)?;
    note_dropped(&dropped, "request");
    request["model"] = Value::String(channel.upstream_model(&chat.model).to_owned());
    let body = Bytes::from(request.to_string());
    let response = app
        .upstreams
        .send(&channel, anthropic::MESSAGES_PATH, anthropic::headers(&HeaderMap::new()), body, chat.stream)
        .await?;
    let response = provider::accept(app.upstreams, &channel, response).await?;
    let mut meter = Meter::new(charge, app.usage.clone(), chat.len());
    meter.estimate_prompt_from(chat.body().clone());
    if provider::is_sse(response.headers()) {
        let relay = MessagesAsChat::new(chat.client_wants_usage, now_unix());
        return Ok(stream(app, &channel, response, relay, meter));
    }
    let (bytes, mut meter) = read(app, &channel, response, meter).await?;
    let Ok(answer) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(not_json(meter, &channel));
    };
    meter.answered(&bytes);
    match answer.get("usage").and_then(answer::from_messages) {
        Some(usage) => meter.observe(usage),
        None => meter.add_text(&messages_text(&answer)),
    }
    meter.finish(200).wait().await;
    let (answer, dropped) = translate::messages_to_chat_response_noted(&answer, now_unix());
    note_dropped(&dropped, "answer");
    Ok(json_response(&answer))
}

/// The body for a messages-native `channel`: the client's bytes, with only
/// the `model` value replaced when the channel maps it (every other field,
/// `cache_control` markers and signed thinking blocks included, byte for
/// byte).
pub fn body_for(call: &MessagesCall, channel: &Channel) -> Result<Bytes, ProxyError> {
    let upstream_model = channel.upstream_model(&call.model);
    let rename = (upstream_model != call.model).then_some(upstream_model);
    Ok(call.body.rewrite(rename, false))
}

/// Logs what a translation could not carry into the other dialect, so it
/// is never dropped silently.
pub fn note_dropped(dropped: &translate::Dropped, what: &str) {
    if !dropped.is_empty() {
        tracing::info!(%dropped, what, "translation dropped what the other dialect cannot carry");
    }
}

fn untranslatable(error: TranslateError) -> ProxyError {
    ProxyError::Untranslatable(error.to_string())
}

/// The streamed client response for `response` sent through `relay`.
fn stream<R: EventRelay>(
    app: Attempt<'_>,
    channel: &Channel,
    response: crate::provider::client::Response,
    relay: R,
    meter: Meter,
) -> Response {
    let idle = app.upstreams.idle_timeout(channel);
    let status = response.status().as_u16();
    let body = pump(Box::pin(response.bytes_stream()), Events::new(relay), Some(meter), idle, status);
    super::reply(StatusCode::OK, None, Body::from_stream(body), true)
}

/// The whole body; a body that breaks off bills nothing and may be retried.
/// (The meter is live while reading, so a client that leaves is billed.)
async fn read(
    app: Attempt<'_>,
    channel: &Channel,
    response: crate::provider::client::Response,
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
    super::reply(StatusCode::OK, None, Body::from(value.to_string()), false)
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
