//! One attempt of a chat-like request in any client dialect on a channel of
//! any kind. The channel's adapter says which dialect it speaks for the
//! model (`provider::chat_call`); when that is the client's, the body passes
//! through with only the adapter's edits (`provider::body_edit`), so prompt
//! caches still match; otherwise it is decoded into the internal form and
//! encoded in the channel's dialect. Answers come back the same way: whole
//! answers through `decode_response`/`encode_response`, streams through
//! `Through` (a decoder, the meter, an encoder) inside the upstream's
//! framing.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use bytes::Bytes;
use serde_json::Value;

use super::{
    note_dropped,
    relay::PassMessages,
    through::{Metered, Through},
};
use crate::{
    error::ProxyError,
    json_body::JsonBody,
    meter::{
        Charge, Meter, answer,
        pump::{Events, primed},
    },
    policy::domain::{Channel, ChannelKind},
    provider::{self, Attempt, ChatCall, Framing, anthropic},
    translate::codec::{self, Answering, Dialect},
};

/// A chat-like request as the client sent it, in its dialect.
pub struct ClientCall<'a> {
    pub dialect: Dialect,
    /// The body as it arrived, fields in order.
    pub body: &'a JsonBody,
    /// The model the client asked for (Gemini clients name it in the path).
    pub model: &'a str,
    pub stream: bool,
    /// The client's headers (messages-native channels get its
    /// `anthropic-…` headers).
    pub headers: &'a HeaderMap,
    /// The client's query string, passed to messages-native channels.
    pub query: Option<&'a str>,
    /// What the answer's encoder needs of the request.
    pub answering: Answering,
}

/// Sends `call` to `channel` and answers in the client's dialect, metered:
/// usage as the upstream reports it, else estimated from the prompt and the
/// answer's text. Fails before anything reached the client on an upstream
/// error, a transport failure or an answer that is not what the channel's
/// dialect sends, so the attempt can move on to the next channel.
pub async fn forward(
    app: Attempt<'_>,
    channel: Arc<Channel>,
    call: &ClientCall<'_>,
    charge: Charge,
) -> Result<Response, ProxyError> {
    let upstream_model = channel.upstream_model(call.model).to_owned();
    let target = provider::chat_call(&channel, &upstream_model, call.stream);
    let edit = provider::body_edit(&channel, &target, &upstream_model, call.headers);
    let same = target.dialect == call.dialect;
    let body = if same {
        call.body.edit(&edit)
    } else {
        let raw = call.body.raw();
        let (encoded, dropped) =
            codec::translate_request(call.dialect, target.dialect, raw, &upstream_model, call.stream, &edit).map_err(
                |error| match error {
                    codec::Untranslated::Json(error) => ProxyError::InvalidJson(error.to_string()),
                    codec::Untranslated::Translate(error) => untranslatable(error),
                },
            )?;
        note_dropped(&dropped, "request");
        Bytes::from(encoded)
    };
    let path = match (channel.kind, call.query) {
        (ChannelKind::Anthropic, Some(query)) if same => anthropic::path_with_query(&target.path, Some(query)),
        _ => target.path.clone(),
    };
    let headers = upstream_headers(&channel, &target, same, call.headers);
    let sent = tokio::time::Instant::now();
    let response = app.upstreams.send(&channel, &path, headers, body, call.stream).await?;
    let response = provider::accept(app.upstreams, &channel, response).await?;
    let raw = call.body.raw().clone();
    let mut meter = Meter::new(charge, app.usage.clone(), raw.len());
    meter.estimate_prompt_from(raw);
    if call.stream && streams(&target, response.headers()) {
        let idle = app.upstreams.idle_timeout(&channel);
        let first_token = app.upstreams.first_token_deadline(&channel, sent);
        return stream(&target, call, same, response, meter, idle, first_token).await;
    }
    let bytes = match app.upstreams.read_body(&channel, response).await {
        Ok(bytes) => bytes,
        Err(error) => {
            meter.cancel();
            return Err(error);
        }
    };
    meter.answered(&bytes);
    if same && !call.stream {
        // Passed through: only the usage is read, by the lean readers where
        // the dialect has one.
        let usage = match target.dialect {
            Dialect::Messages => answer::messages_body_usage(&bytes),
            Dialect::Chat => answer::response_usage(&bytes),
            _ => None,
        };
        if let Some(usage) = usage {
            meter.observe(usage);
            meter.finish(200).wait().await;
            return Ok(provider::reply(StatusCode::OK, None, Body::from(bytes), false));
        }
    }
    let Ok(answer) = serde_json::from_slice::<Value>(&bytes) else {
        meter.cancel();
        tracing::warn!(channel = %channel.id, "upstream answered with a body that is not JSON");
        let message = "upstream answer is not JSON".to_owned();
        return Err(ProxyError::UpstreamStatus { status: StatusCode::BAD_GATEWAY, message });
    };
    let decoded = codec::decode_response(target.dialect, &answer);
    match decoded.usage {
        Some(usage) => meter.observe(usage),
        None => meter.add_text(&decoded.text()),
    }
    meter.finish(200).wait().await;
    if call.stream {
        // A stream was asked for and a whole answer came: sent as the
        // stream of it, in the client's framing.
        let mut encoder = codec::stream_encoder(call.dialect, &call.answering);
        let mut out = Vec::new();
        for event in decoded.events() {
            encoder.push(&event, &mut out);
        }
        encoder.finish(&mut out);
        return Ok(provider::reply(StatusCode::OK, stream_type(call), Body::from(out), true));
    }
    let body = if same {
        bytes
    } else {
        Bytes::from(codec::encode_response(call.dialect, &decoded, &call.answering).to_string())
    };
    Ok(provider::reply(StatusCode::OK, None, Body::from(body), false))
}

/// Whether the upstream answered with a stream in the framing its adapter
/// announced.
fn streams(target: &ChatCall, headers: &HeaderMap) -> bool {
    match target.framing {
        Framing::Sse => provider::is_sse(headers),
        Framing::EventStream => headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/vnd.amazon.eventstream")),
    }
}

/// The streamed client response: the upstream's events decoded in its
/// dialect and encoded in the client's (SSE framing; AWS event streams
/// through the Bedrock adapter's frame reader), or, in the client's own
/// dialect and framing, passed untouched and read only to meter. Returns
/// once the first token came (`pump::primed`), failing, with nothing sent
/// or billed, when none came by `first_token` or the stream broke first
/// (or went silent for `idle`).
async fn stream(
    target: &ChatCall,
    call: &ClientCall<'_>,
    same: bool,
    response: provider::client::Response,
    meter: Meter,
    idle: std::time::Duration,
    first_token: Option<tokio::time::Instant>,
) -> Result<Response, ProxyError> {
    let status = response.status().as_u16();
    let decoder = codec::stream_decoder(target.dialect);
    let upstream = Box::pin(response.bytes_stream());
    let meter = Some(meter);
    let body = match target.framing {
        // Messages events are read by their own lean reader: the stream
        // coding agents send most.
        Framing::Sse if same && target.dialect == Dialect::Messages => {
            let relay = Events::new(PassMessages::default());
            Body::from_stream(primed(upstream, relay, meter, idle, status, first_token).await?)
        }
        Framing::Sse if same && stream_type(call).is_none() => {
            let relay = Events::new(Metered::new(decoder));
            Body::from_stream(primed(upstream, relay, meter, idle, status, first_token).await?)
        }
        Framing::Sse => {
            let relay = Events::new(Through::new(decoder, codec::stream_encoder(call.dialect, &call.answering)));
            Body::from_stream(primed(upstream, relay, meter, idle, status, first_token).await?)
        }
        Framing::EventStream => {
            let relay = Through::new(decoder, codec::stream_encoder(call.dialect, &call.answering));
            let relay = provider::bedrock::Frames::new(relay);
            Body::from_stream(primed(upstream, relay, meter, idle, status, first_token).await?)
        }
    };
    Ok(provider::reply(StatusCode::OK, stream_type(call), body, true))
}

/// The content type of a streamed answer that is not SSE: Gemini's
/// JSON-array stream.
fn stream_type(call: &ClientCall<'_>) -> Option<HeaderValue> {
    (call.dialect == Dialect::Gemini && call.answering.json_array).then(|| HeaderValue::from_static("application/json"))
}

/// The headers of the upstream request: JSON, and for messages-native
/// channels the `anthropic-version` and, when the client spoke messages, its
/// other `anthropic-…` headers.
fn upstream_headers(channel: &Channel, target: &ChatCall, same: bool, client: &HeaderMap) -> HeaderMap {
    match (channel.kind, target.dialect) {
        (ChannelKind::Anthropic, _) if same => anthropic::headers(client),
        (ChannelKind::Anthropic, _) => anthropic::headers(&HeaderMap::new()),
        (ChannelKind::Vertex, Dialect::Messages) => {
            let mut headers = provider::json_headers();
            if same && let Some(beta) = client.get("anthropic-beta") {
                headers.insert("anthropic-beta", beta.clone());
            }
            headers
        }
        _ => provider::json_headers(),
    }
}

fn untranslatable(error: crate::translate::TranslateError) -> ProxyError {
    ProxyError::Untranslatable(error.to_string())
}
