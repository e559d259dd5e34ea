//! One upstream attempt of a chat-like request for every pairing of client
//! dialect (chat, messages, responses, Gemini) and channel kind, shared by
//! the handlers (none imports another): `forward` passes the body through
//! when the channel speaks the client's dialect for the model, and
//! translates through the internal form otherwise. The chat handler keeps
//! its own passthrough for OpenAI-shaped channels; `chat` and `messages`
//! here are the chat and messages clients' way into `forward`.
//!
//! Calls to a messages-native channel carry its key as `x-api-key`, the
//! client's `anthropic-version` (or `compat-version`, else
//! `provider::anthropic::DEFAULT_VERSION`) and the client's other
//! `anthropic-…` and vendor `x-…` headers, never the client's own key.

use std::sync::Arc;

use axum::{http::HeaderMap, response::Response};
use bytes::Bytes;
use serde_json::Value;

mod forward;
mod relay;
pub mod through;

pub use self::forward::{ClientCall, forward};

use crate::{
    error::ProxyError, json_body::JsonBody, meter::Charge, now_unix, openai::ChatRequest, policy::domain::Channel,
    provider::Attempt, translate,
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
/// messages dialect; metered like chat (see `forward`).
pub async fn messages(
    app: Attempt<'_>,
    channel: Arc<Channel>,
    call: &MessagesCall,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let call = ClientCall {
        dialect: translate::Dialect::Messages,
        body: &call.body,
        model: &call.model,
        stream: call.stream,
        headers: &call.headers,
        query: call.query.as_deref(),
        answering: translate::Answering { model: call.model.clone(), created: now_unix(), ..Default::default() },
    };
    forward(app, channel, &call, charge).await
}

/// Sends the chat request `chat` to a `channel` that does not speak chat,
/// translated, and answers in the chat dialect; metered like chat (see
/// `forward`).
pub async fn chat(
    app: Attempt<'_>,
    channel: Arc<Channel>,
    chat: &ChatRequest,
    charge: Charge,
) -> Result<Response, ProxyError> {
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
    forward(app, channel, &call, charge).await
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
