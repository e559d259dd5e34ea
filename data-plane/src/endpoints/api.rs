//! The OpenAI endpoints besides chat: `/v1/completions`, `/v1/responses`,
//! `/v1/responses/compact`, `/v1/embeddings`, `/v1/moderations`,
//! `/v1/images/generations`, `/v1/images/edits`, `/v1/audio/transcriptions`,
//! `/v1/audio/translations` and `/v1/audio/speech`, and
//! `/v1/responses/input_tokens` (`responses`). Each runs the one
//! pipeline (admit, body limit, route with the endpoint category, attempts) and goes
//! to the same path under an OpenAI channel's base URL (an Azure channel's
//! deployment or v1 path, `provider::azure::path`). Bodies pass through as
//! bytes; the only rewrites are the mapped model and, for streamed
//! completions, `stream_options.include_usage`. `/v1/responses` reaches
//! channels of other kinds translated (`responses`); the other endpoints
//! are OpenAI's own and refused on them. Answers are JSON, SSE
//! (completions and responses stream; metered event by event) or, for
//! speech, binary audio streamed chunk by chunk. `GET /v1/responses`
//! takes WebSocket upgrades: each response on the socket is one call of
//! the same handler (`websocket`).
//!
//! Pricing (`bill`): tokens at the model's token prices plus its request
//! price, as for chat; images at the image price each; transcriptions and
//! translations by tokens when the upstream reports them, else per second of
//! audio (reported, or estimated from the file size); speech by input
//! characters at the input price per 1M. All but the request price scale
//! with the group ratio.

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, header},
    response::Response,
    routing::{get, post},
};
use bytes::Bytes;
use serde_json::Value;

mod embeddings;
mod responses;
mod websocket;

use super::multipart::{self, Form};
use crate::{
    error::ProxyError,
    json_body::{JsonBody, Kind},
    meter::answer::usage_of,
    meter::{
        Charge, Meter,
        pump::{Events, Raw, primed, pump},
        sse::SseFilter,
    },
    pipeline::{self, App},
    policy::auth::Access,
    policy::domain::{Channel, ChannelKind},
    pricing::{Units, Usage},
    provider, tokens,
};

/// The model of a moderation request that names none (OpenAI's default).
pub const DEFAULT_MODERATION_MODEL: &str = "omni-moderation-latest";
/// Audio bitrate assumed when the upstream reports no duration: 128 kbit/s.
pub const ESTIMATED_AUDIO_BYTES_PER_SECOND: u64 = 16_000;

/// One of the endpoints served here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Completions,
    Responses,
    ResponsesCompact,
    Embeddings,
    Moderations,
    ImageGenerations,
    ImageEdits,
    Transcriptions,
    Translations,
    Speech,
}

const ALL: [Api; 10] = [
    Api::Completions,
    Api::Responses,
    Api::ResponsesCompact,
    Api::Embeddings,
    Api::Moderations,
    Api::ImageGenerations,
    Api::ImageEdits,
    Api::Transcriptions,
    Api::Translations,
    Api::Speech,
];

/// A validated request.
struct Call {
    api: Api,
    model: String,
    /// The client named no model (moderations only).
    defaulted: bool,
    body: CallBody,
    stream: bool,
    client_wants_usage: bool,
    /// Images asked for (`n`, default 1).
    images: i64,
    /// Characters of a speech request's `input`.
    characters: i64,
    /// Bytes of the uploaded audio file(s).
    audio_bytes: u64,
}

enum CallBody {
    Json(JsonBody),
    Form(Form),
}

/// The routes of every endpoint served here.
pub fn routes() -> Router<Arc<App>> {
    let router = Router::new()
        .route(responses::INPUT_TOKENS_PATH, post(responses::input_tokens))
        .route(websocket::PATH, get(websocket::upgrade));
    ALL.into_iter().fold(router, |router, api| {
        router.route(api.path(), post(move |State(app): State<Arc<App>>, request: Request| handle(app, api, request)))
    })
}

/// Handles a request to `api`.
async fn handle(app: Arc<App>, api: Api, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let body = admitted.read_body(body).await?;
    let call = Call::parse(api, &admitted.parts.headers, body).await?;
    let (model, candidates) = pipeline::route(&admitted, &call.model, api.path())?;
    let charge = pipeline::reserve(&app, &admitted, model.clone(), api.path(), call.bound()).await?;
    let (app, call, charge) = (&*app, &call, &charge);
    let scope = match &call.body {
        CallBody::Json(json) => admitted.scope_in_conversation(app, Some(json), &call.model),
        CallBody::Form(_) => admitted.scope_in_conversation(app, None, &call.model),
    };
    if call.stream {
        pipeline::keepalive::arm(&admitted);
    }
    pipeline::attempts(&app.upstreams, scope, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        app.usage.in_flight(charge, call.len(), |charge| forward(app, channel, call, charge))
    })
    .await
}

/// One attempt on `channel`; it fails, without having sent the client anything, on an upstream error status, a transport failure, or a plain answer that breaks off.
async fn forward(app: &App, channel: Arc<Channel>, call: &Call, charge: Charge) -> Result<Response, ProxyError> {
    if !responses::speaks_openai(&channel) {
        return match (&call.body, call.api) {
            (CallBody::Json(body), Api::Responses) => {
                responses::translated(app, channel, body, &call.model, call.stream, charge).await
            }
            (CallBody::Json(body), Api::Embeddings) if channel.kind == ChannelKind::Gemini => {
                embeddings::on_gemini(app, channel, body, &call.model, charge).await
            }
            _ => Err(ProxyError::Untranslatable(format!(
                "{} is served by openai and azure channels (embeddings also by gemini ones), and this model's channel is {}",
                call.api.path(),
                channel.kind.name()
            ))),
        };
    }
    let upstream_model = channel.upstream_model(&call.model);
    let body = call.upstream_body(upstream_model).await?;
    let streams = call.stream || call.api == Api::Speech;
    let path = call.api.channel_path(&channel, upstream_model);
    let sent = tokio::time::Instant::now();
    let response = app.upstreams.post(&channel, &path, call.content_type(), body, streams).await?;
    let response = provider::accept(&app.upstreams, &channel, response).await?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let idle = app.upstreams.idle_timeout(&channel);
    if provider::is_sse(response.headers()) {
        let filter = match call.api {
            Api::Completions => SseFilter::new(call.client_wants_usage),
            _ => SseFilter::typed_events(),
        };
        let mut meter = Meter::new(charge, app.usage.clone(), call.len());
        if let CallBody::Json(json) = &call.body {
            meter.estimate_prompt_from(json.raw().clone());
        }
        // Committed once the first token came, so a silent channel is failed over.
        let first_token = app.upstreams.first_token_deadline(&channel, sent);
        let upstream = Box::pin(response.bytes_stream());
        let body = primed(upstream, Events::new(filter), Some(meter), idle, status.as_u16(), first_token).await?;
        return Ok(provider::reply(status, content_type, Body::from_stream(body), true));
    }
    if call.api == Api::Speech {
        let mut meter = Meter::new(charge, app.usage.clone(), call.len());
        meter.observe(Usage { prompt_tokens: call.characters, ..Usage::default() });
        let expected = response.content_length();
        let body = pump(Box::pin(response.bytes_stream()), Raw::new(expected), Some(meter), idle, status.as_u16());
        let content_type = content_type.or(Some(HeaderValue::from_static("application/octet-stream")));
        return Ok(provider::reply(status, content_type, Body::from_stream(body), false));
    }
    let bytes = app.upstreams.read_body(&channel, response).await?;
    let (usage, units, estimated) = call.bill(&bytes);
    // The record is on the spool before the client can have the answer.
    app.usage.record_with(&charge, usage, units, status.as_u16(), estimated).wait().await;
    Ok(provider::reply(status, content_type, Body::from(bytes), false))
}

// === impl Api ===

impl Api {
    /// The client-facing path.
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Responses => "/v1/responses",
            Api::ResponsesCompact => "/v1/responses/compact",
            Api::Embeddings => "/v1/embeddings",
            Api::Moderations => "/v1/moderations",
            Api::ImageGenerations => "/v1/images/generations",
            Api::ImageEdits => "/v1/images/edits",
            Api::Transcriptions => "/v1/audio/transcriptions",
            Api::Translations => "/v1/audio/translations",
            Api::Speech => "/v1/audio/speech",
        }
    }

    /// The path under an OpenAI channel's base URL (which ends in `/v1`).
    fn upstream_path(self) -> &'static str {
        &self.path()["/v1".len()..]
    }

    /// The path on OpenAI-shaped `channel` for `upstream_model`: Azure's
    /// deployment path with its `api-version`, or its v1 path; else the
    /// path under the base URL.
    fn channel_path(self, channel: &Channel, upstream_model: &str) -> std::borrow::Cow<'static, str> {
        match channel.kind {
            ChannelKind::Azure => provider::azure::path(channel, upstream_model, self.upstream_path()).into(),
            _ => self.upstream_path().into(),
        }
    }

    /// Whether the endpoint takes multipart forms (it may also take JSON).
    fn takes_forms(self) -> bool {
        matches!(self, Api::ImageEdits | Api::Transcriptions | Api::Translations)
    }
}

// === impl Call ===

impl Call {
    async fn parse(api: Api, headers: &HeaderMap, body: Bytes) -> Result<Call, ProxyError> {
        let body = if api.takes_forms() && multipart::is_multipart(headers) {
            CallBody::Form(Form::parse(body, headers).await?)
        } else {
            CallBody::Json(JsonBody::parse(body)?)
        };
        let text = |name: &str| match &body {
            CallBody::Json(json) => json.value::<String>(name),
            CallBody::Form(form) => form.field(name).map(str::to_owned),
        };
        let number = |name: &str| match &body {
            CallBody::Json(json) => json.value::<i64>(name),
            CallBody::Form(form) => form.field(name).and_then(|v| v.trim().parse::<i64>().ok()),
        };
        let (model, defaulted) = match text("model").filter(|m| !m.is_empty()) {
            Some(model) => (model, false),
            None if api == Api::Moderations => (DEFAULT_MODERATION_MODEL.to_owned(), true),
            None => return Err(ProxyError::MissingField("model")),
        };
        let (stream, client_wants_usage) = match &body {
            CallBody::Json(json) => (json.is_true("stream"), json.wants_usage()),
            CallBody::Form(form) => (form.field("stream").is_some_and(|v| v.trim() == "true"), false),
        };
        let images = match api {
            Api::ImageGenerations | Api::ImageEdits => number("n").unwrap_or(1).max(1),
            _ => 0,
        };
        let characters = match api {
            Api::Speech => {
                let input = text("input").ok_or(ProxyError::MissingField("input"))?;
                i64::try_from(input.chars().count()).unwrap_or(i64::MAX)
            }
            _ => 0,
        };
        let audio_bytes = match &body {
            CallBody::Form(form) if api != Api::ImageEdits => form.files.iter().map(|(_, size)| size).sum(),
            _ => 0,
        };
        Ok(Call { api, model, defaulted, body, stream, client_wants_usage, images, characters, audio_bytes })
    }

    /// The most this call may cost, as known before it is sent.
    fn bound(&self) -> pipeline::Bound {
        let max_output_tokens = match self.api {
            Api::Completions => self.number("max_tokens"),
            Api::Responses | Api::ResponsesCompact => self.number("max_output_tokens"),
            // Priced by input alone (or by units).
            _ => Some(0),
        };
        let mut units = Units { images: self.images, ..Units::default() };
        if matches!(self.api, Api::Transcriptions | Api::Translations) {
            let millis = (self.audio_bytes * 1000).div_ceil(ESTIMATED_AUDIO_BYTES_PER_SECOND);
            units.audio_millis = i64::try_from(millis).unwrap_or(i64::MAX);
        }
        // Speech is priced per character of its input, as prompt tokens.
        let body_bytes =
            if self.api == Api::Speech { usize::try_from(self.characters).unwrap_or(0) * 4 } else { self.len() };
        pipeline::Bound { body_bytes, max_output_tokens, units }
    }

    /// A whole-number field of a JSON body.
    fn number(&self, name: &str) -> Option<i64> {
        match &self.body {
            CallBody::Json(json) => json.value::<i64>(name),
            CallBody::Form(_) => None,
        }
    }

    fn len(&self) -> usize {
        match &self.body {
            CallBody::Json(json) => json.len(),
            CallBody::Form(form) => form.len(),
        }
    }

    fn content_type(&self) -> HeaderValue {
        match &self.body {
            CallBody::Json(_) => HeaderValue::from_static("application/json"),
            CallBody::Form(form) => form.content_type(),
        }
    }

    /// The body for a channel that calls the model `upstream_model`.
    async fn upstream_body(&self, upstream_model: &str) -> Result<Bytes, ProxyError> {
        let rename = (upstream_model != self.model || self.defaulted).then_some(upstream_model);
        // A defaulted model that the channel does not map stays unnamed.
        let rename = rename.filter(|m| !(self.defaulted && *m == self.model));
        match &self.body {
            CallBody::Json(json) => {
                let force_usage = self.api == Api::Completions && self.stream && !self.client_wants_usage;
                Ok(json.rewrite(rename, force_usage))
            }
            CallBody::Form(form) => form.upstream_body(rename).await,
        }
    }

    /// What a plain (non-streamed) answer `body` costs: token usage, other
    /// units, and whether any of it is an estimate.
    fn bill(&self, body: &Bytes) -> (Usage, Units, bool) {
        // The answer's top-level fields in place: image data and embeddings
        // are skipped, never parsed into values.
        let answer = JsonBody::parse(body.clone()).ok();
        let value = |name: &str| answer.as_ref()?.value::<Value>(name);
        let usage = value("usage");
        let reported = usage.as_ref().and_then(usage_of);
        let mut units = Units::default();
        match self.api {
            Api::Moderations => return (reported.unwrap_or_default(), units, false),
            Api::ImageGenerations | Api::ImageEdits => {
                let delivered = match answer.as_ref().and_then(|a| a.value::<Kind>("data")) {
                    Some(Kind::Array(entries)) => Some(entries),
                    _ => None,
                };
                units.images = delivered.map_or(self.images, |n| i64::try_from(n).unwrap_or(i64::MAX));
                return (reported.unwrap_or_default(), units, false);
            }
            Api::Transcriptions | Api::Translations => {
                if let Some(usage) = reported {
                    return (usage, units, false);
                }
                let seconds = usage
                    .as_ref()
                    .and_then(|u| u.get("seconds").cloned())
                    .or_else(|| value("duration"))
                    .and_then(|s| s.as_f64());
                return match seconds {
                    Some(seconds) => {
                        units.audio_millis = (seconds.max(0.0) * 1000.0).ceil() as i64;
                        (Usage::default(), units, false)
                    }
                    None => {
                        let millis = (self.audio_bytes * 1000).div_ceil(ESTIMATED_AUDIO_BYTES_PER_SECOND);
                        units.audio_millis = i64::try_from(millis).unwrap_or(i64::MAX);
                        (Usage::default(), units, true)
                    }
                };
            }
            _ => {}
        }
        match reported {
            Some(usage) => (usage, units, false),
            // No usage: count locally with the model family's tokenizer
            // (chars / 4 for unknown families); marked as an estimate.
            None => {
                let prompt_tokens = match &self.body {
                    CallBody::Json(json) => tokens::count_request(&self.model, json.raw()),
                    CallBody::Form(_) => i64::try_from(self.len().div_ceil(4)).unwrap_or(i64::MAX),
                };
                let completion_tokens = tokens::count_request(&self.model, body);
                (Usage { prompt_tokens, completion_tokens, ..Usage::default() }, units, true)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    async fn call(api: Api, body: &str) -> Result<Call, ProxyError> {
        Call::parse(api, &HeaderMap::new(), Bytes::from(body.to_owned())).await
    }

    #[tokio::test]
    async fn models_are_required_except_for_moderations() {
        assert_eq!(call(Api::Embeddings, r#"{"input":"x"}"#).await.err(), Some(ProxyError::MissingField("model")));
        let moderation = call(Api::Moderations, r#"{"input":"x"}"#).await.unwrap();
        assert_eq!(moderation.model, DEFAULT_MODERATION_MODEL);
        assert_eq!(moderation.upstream_body(DEFAULT_MODERATION_MODEL).await.unwrap(), r#"{"input":"x"}"#.as_bytes());
        let mapped = moderation.upstream_body("omni-2").await.unwrap();
        assert_eq!(mapped, r#"{"input":"x","model":"omni-2"}"#.as_bytes());
        assert_eq!(call(Api::Speech, r#"{"model":"tts"}"#).await.err(), Some(ProxyError::MissingField("input")));
    }

    #[tokio::test]
    async fn answers_are_billed_by_what_they_report() {
        let images = call(Api::ImageGenerations, r#"{"model":"img","prompt":"p","n":3}"#).await.unwrap();
        assert_eq!(images.bill(&Bytes::from_static(br#"{"created":1,"data":[{},{}]}"#)).1.images, 2);
        assert_eq!(images.bill(&Bytes::from_static(b"garbage")).1.images, 3);
        assert_eq!(images.bill(&Bytes::from_static(br#"{"data":{"a":[1]}}"#)).1.images, 3, "data not a list");
        let repeated = br#"{"data":[{},{},{},{}],"usage":{"total_tokens":1},"data":[{"b64_json":"x"}]}"#;
        assert_eq!(images.bill(&Bytes::from_static(repeated)).1.images, 1, "the last of a repeated name");
        let speech = call(Api::Speech, r#"{"model":"tts","input":"héllo"}"#).await.unwrap();
        assert_eq!(speech.characters, 5);
        let text = call(Api::Transcriptions, r#"{"model":"w"}"#).await.unwrap();
        assert_eq!(
            text.bill(&Bytes::from_static(br#"{"text":"x","duration":2.5}"#)),
            (Usage::default(), Units { audio_millis: 2500, ..Units::default() }, false)
        );
        let tokens = text
            .bill(&Bytes::from_static(br#"{"text":"x","usage":{"type":"tokens","input_tokens":7,"output_tokens":3}}"#));
        assert_eq!((tokens.0.prompt_tokens, tokens.1.audio_millis, tokens.2), (7, 0, false));
        assert!(text.bill(&Bytes::from_static(b"plain text")).2, "no duration: estimated");
        let seconds = text.bill(&Bytes::from_static(br#"{"usage":{"type":"duration","seconds":1.2},"duration":9}"#));
        assert_eq!((seconds.1.audio_millis, seconds.2), (1200, false), "usage's seconds before duration");
        let completion = call(Api::Completions, r#"{"model":"m","prompt":"p"}"#).await.unwrap();
        let (usage, _, estimated) =
            completion.bill(&Bytes::from_static(br#"{"usage":{"prompt_tokens":3,"completion_tokens":4}}"#));
        assert_eq!((usage.prompt_tokens, usage.completion_tokens, estimated), (3, 4, false));
        assert!(completion.bill(&Bytes::from_static(b"{}")).2);
    }

    #[test]
    fn azure_channels_get_their_deployment_or_v1_path_on_every_endpoint() {
        let mut channel = crate::policy::snapshot::tests::channel("c", 0, 1, &["g"], &["m"]);
        assert_eq!(Api::Embeddings.channel_path(&channel, "m"), "/embeddings");
        channel.kind = ChannelKind::Azure;
        assert_eq!(Api::Responses.channel_path(&channel, "m"), "/openai/v1/responses");
        let settings = [("api_version", "2025-04-01-preview"), ("deployment", "prod")];
        channel.settings = Arc::new(settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        for api in ALL {
            let path = api.channel_path(&channel, "m");
            let want = format!("/openai/deployments/prod{}?api-version=2025-04-01-preview", api.upstream_path());
            assert_eq!(path, want);
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_body_is_parsed_or_refused_with_a_4xx_and_any_answer_billed(
            api in proptest::sample::select(&ALL[..]),
            body in crate::fuzz::body(),
            answer in crate::fuzz::body(),
        ) {
            match crate::fuzz::block_on(Call::parse(api, &HeaderMap::new(), Bytes::from(body))) {
                Ok(call) => {
                    let (usage, units, _) = call.bill(&Bytes::from(answer.clone()));
                    let _ = call.bound();
                    // What the answer parsed whole says, where it parses.
                    if let Ok(whole) = serde_json::from_slice::<Value>(&answer) {
                        if let Some(reported) = whole.get("usage").and_then(usage_of) {
                            proptest::prop_assert_eq!(usage, reported);
                        }
                        if let Some(data) = whole.get("data").and_then(Value::as_array)
                            && matches!(api, Api::ImageGenerations | Api::ImageEdits)
                        {
                            proptest::prop_assert_eq!(units.images, i64::try_from(data.len()).unwrap());
                        }
                    }
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }

        #[test]
        fn any_form_is_parsed_or_refused_with_a_4xx(
            api in proptest::sample::select(&ALL[..]),
            form in crate::fuzz::form(),
        ) {
            let mut headers = HeaderMap::new();
            let content_type = format!("multipart/form-data; boundary={}", crate::fuzz::BOUNDARY);
            headers.insert(axum::http::header::CONTENT_TYPE, content_type.parse().unwrap());
            match crate::fuzz::block_on(Call::parse(api, &headers, Bytes::from(form))) {
                Ok(call) => {
                    let _ = call.bound();
                    let upstream = crate::fuzz::block_on(call.upstream_body("other"));
                    if let Err(error) = upstream {
                        crate::fuzz::assert_client_error(&error)?;
                    }
                }
                Err(error) => crate::fuzz::assert_client_error(&error)?,
            }
        }
    }
}
