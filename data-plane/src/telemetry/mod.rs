//! What the data plane tells OpenTelemetry, kept apart from the pipeline it
//! watches: the server span of each `/v1` request (named and attributed by
//! the GenAI semantic conventions, plus the gateway's own `gw.*`
//! attributes), a client span per upstream attempt, and the metrics
//! (`metrics`). The pipeline calls the small hooks below at the points
//! where it learns something; each does nothing beyond the plain `tracing`
//! span unless tracing is on. Prompt and completion text never go on a
//! span.

pub mod metrics;
mod sums;

use std::{sync::Arc, time::Instant};

use axum::http::{HeaderMap, Method, StatusCode};
use opentelemetry::{
    Array, KeyValue, StringValue, Value,
    trace::{Status, TraceContextExt as _},
};
use serde::Deserialize;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::{
    error::ProxyError,
    policy::domain::{Channel, ChannelKind},
    pricing::Usage,
    trail::{Trail, TrailFields},
};

/// A metered request's outcome, as `usage` reports it.
pub struct Seen<'a> {
    pub endpoint: &'static str,
    pub model: &'a str,
    pub channel: &'a str,
    pub usage: Usage,
    pub cost_micros: i64,
    pub estimated: bool,
    pub status: u16,
    pub started: Instant,
    pub answer: &'a Answer,
}

/// A request's span and trail, carried by its charge to where its usage
/// is recorded (for a stream, when the stream ends).
#[derive(Debug, Clone)]
pub struct Traced {
    pub span: Span,
    pub trail: Arc<Trail>,
}

/// What an answer said of itself beyond its usage.
#[derive(Debug, Default)]
pub struct Answer {
    /// When the first chunk of a streamed answer reached the meter.
    pub first_output: Option<Instant>,
    /// The model the upstream says answered.
    pub model: Option<String>,
    /// Why each choice ended (`stop`, `length`, `end_turn`, …).
    pub finish_reasons: Vec<String>,
}

// === impl Traced ===

impl Traced {
    /// The current (request) span and `trail`. The span only while
    /// tracing: nothing else reads it, and holding it costs a clone.
    pub fn current(trail: Arc<Trail>) -> Traced {
        let span = if gw_telemetry::tracing_enabled() { Span::current() } else { Span::none() };
        Traced { span, trail }
    }
}

impl Default for Traced {
    /// No span, an empty trail.
    fn default() -> Traced {
        Traced { span: Span::none(), trail: Arc::default() }
    }
}

/// The GenAI operation a client-facing path performs, if any.
pub fn operation(path: &str) -> Option<&'static str> {
    match path {
        "/v1/chat/completions" | "/v1/messages" | "/v1/responses" | "/v1/responses/compact" => Some("chat"),
        "/v1beta/models:generateContent" | "/v1beta/models:streamGenerateContent" => Some("chat"),
        "/v1/completions" => Some("text_completion"),
        "/v1/embeddings" => Some("embeddings"),
        p if p.starts_with("/v1/images/") || p.starts_with("/v1/audio/") => Some("generate_content"),
        "/v1/videos" | "/v1/video/generations" => Some("generate_content"),
        _ => None,
    }
}

/// `gen_ai.provider.name` of a channel's kind.
pub fn provider_name(kind: ChannelKind) -> &'static str {
    match kind {
        ChannelKind::OpenAi => "openai",
        ChannelKind::Anthropic => "anthropic",
        ChannelKind::Azure => "azure.ai.openai",
        ChannelKind::Bedrock => "aws.bedrock",
        ChannelKind::Vertex => "gcp.vertex_ai",
        ChannelKind::Gemini => "gcp.gemini",
    }
}

/// The span of one request to `route` (the matched route, `None` for an
/// unknown path): a server span continuing the caller's `traceparent` for
/// `/v1` routes when tracing is on, else the plain span that carries the
/// request id on log lines.
pub fn request_span(request_id: &str, method: &Method, route: Option<&str>, headers: &HeaderMap) -> Span {
    let route = route.filter(|r| r.starts_with("/v1/"));
    let Some(route) = route.filter(|_| gw_telemetry::tracing_enabled()) else {
        return tracing::info_span!("request", request_id = %request_id);
    };
    let name = match operation(route) {
        Some(operation) => operation.to_owned(),
        None => format!("{method} {route}"),
    };
    let span = tracing::info_span!("request", request_id = %request_id, otel.name = name, otel.kind = "server");
    gw_telemetry::continue_from(&span, headers);
    span.set_attribute("http.request.method", method.to_string());
    span.set_attribute("http.route", route.to_owned());
    span.set_attribute("gw.request_id", request_id.to_owned());
    if let Some(operation) = operation(route) {
        span.set_attribute("gen_ai.operation.name", operation);
    }
    span
}

/// The response went out (headers; a stream's body may still be running):
/// notes on `span` what the pipeline learned, the status and the refusal.
pub fn responded(
    span: &Span,
    route: Option<&str>,
    fields: &TrailFields,
    status: StatusCode,
    refusal: Option<&ProxyError>,
) {
    if !gw_telemetry::tracing_enabled() || route.is_none_or(|r| !r.starts_with("/v1/")) {
        return;
    }
    let operation = route.and_then(operation);
    if let (Some(operation), Some(model)) = (operation, &fields.model) {
        // The span has started: a recorded `otel.name` would not rename it.
        span.context().span().update_name(format!("{operation} {model}"));
    }
    span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    let strings = [
        ("gen_ai.request.model", fields.model.as_deref()),
        ("gw.token.id", fields.token.as_deref()),
        ("gw.account.id", fields.account.as_deref()),
        ("gw.group", fields.group.as_deref()),
        ("gw.channel.id", fields.channel.as_deref()),
    ];
    for (key, value) in strings {
        if let Some(value) = value {
            span.set_attribute(key, value.to_owned());
        }
    }
    if let Some(provider) = fields.provider {
        span.set_attribute("gen_ai.provider.name", provider);
    }
    span.set_attribute("gw.attempts", i64::from(fields.attempts));
    if let Some(error) = refusal {
        span.set_attribute("gw.refusal.reason", error.reason());
        span.set_attribute("error.type", error.reason());
    }
    if status.is_server_error() {
        span.set_status(Status::error(refusal.map_or("", ProxyError::reason)));
    }
}

/// The request parameters a client sent in a JSON `body`, as
/// `gen_ai.request.*` attributes on the current (request) span.
pub fn request_body(body: &[u8]) {
    if !gw_telemetry::tracing_enabled() || body.first() != Some(&b'{') {
        return;
    }
    #[derive(Deserialize)]
    struct Params {
        max_tokens: Option<i64>,
        max_completion_tokens: Option<i64>,
        max_output_tokens: Option<i64>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        top_k: Option<f64>,
        frequency_penalty: Option<f64>,
        presence_penalty: Option<f64>,
        seed: Option<i64>,
        n: Option<i64>,
        stream: Option<bool>,
    }
    let Ok(params) = serde_json::from_slice::<Params>(body) else { return };
    let span = Span::current();
    let max_tokens = params.max_tokens.or(params.max_completion_tokens).or(params.max_output_tokens);
    let ints = [("gen_ai.request.max_tokens", max_tokens), ("gen_ai.request.seed", params.seed)];
    for (key, value) in ints {
        if let Some(value) = value {
            span.set_attribute(key, value);
        }
    }
    if let Some(n) = params.n {
        span.set_attribute("gen_ai.request.choice.count", n);
    }
    let floats = [
        ("gen_ai.request.temperature", params.temperature),
        ("gen_ai.request.top_p", params.top_p),
        ("gen_ai.request.top_k", params.top_k),
        ("gen_ai.request.frequency_penalty", params.frequency_penalty),
        ("gen_ai.request.presence_penalty", params.presence_penalty),
    ];
    for (key, value) in floats {
        if let Some(value) = value {
            span.set_attribute(key, value);
        }
    }
    span.set_attribute("gw.stream", params.stream.unwrap_or(false));
}

/// The client span of attempt number `n` of the request of `trail` on
/// `channel`; its context is what the upstream receives in `traceparent`.
/// Notes in `trail` the model name the channel is asked for.
pub fn attempt_span(channel: &Channel, trail: &Trail, n: u32) -> Span {
    if !gw_telemetry::tracing_enabled() {
        return Span::none();
    }
    let mut model = None;
    trail.update(|t| {
        t.upstream_model = t.model.as_deref().map(|m| channel.upstream_model(m).to_owned());
        model.clone_from(&t.model);
    });
    let model = model.as_deref();
    let name = match model {
        Some(model) => format!("chat {}", channel.upstream_model(model)),
        None => "upstream".to_owned(),
    };
    let span = tracing::info_span!("upstream attempt", otel.name = name, otel.kind = "client");
    span.set_attribute("gen_ai.provider.name", provider_name(channel.kind));
    if let Some(model) = model {
        span.set_attribute("gen_ai.request.model", channel.upstream_model(model).to_owned());
    }
    span.set_attribute("gw.channel.id", channel.id.clone());
    span.set_attribute("gw.attempt", i64::from(n));
    span
}

/// An attempt ended: with an answer (`None`) or `error`.
pub fn attempt_ended(span: &Span, error: Option<&ProxyError>) {
    if !gw_telemetry::tracing_enabled() {
        return;
    }
    if let Some(error) = error {
        span.set_attribute("error.type", error.reason());
        if let ProxyError::UpstreamStatus { status, .. } = error {
            span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
        }
        span.set_attribute("gw.retryable", error.is_retryable());
        span.set_status(Status::error(error.reason()));
    }
}

/// Puts `span`'s trace context into an upstream request's `headers`.
pub fn inject(headers: &mut HeaderMap) {
    if gw_telemetry::tracing_enabled() {
        gw_telemetry::inject(&Span::current(), headers);
    }
}

/// What one request used and cost, known when its answer ended: on its
/// span (whose end moves to now, so a stream's span covers the stream) and
/// in the metrics.
pub fn usage(traced: &Traced, seen: &Seen<'_>) {
    metrics::usage(seen);
    traced.trail.update(|t| t.cost_micros = Some(seen.cost_micros));
    if !gw_telemetry::tracing_enabled() {
        return;
    }
    let span = &traced.span;
    span.in_scope(|| {
        span.set_attribute("gen_ai.usage.input_tokens", seen.usage.prompt_tokens);
        span.set_attribute("gen_ai.usage.output_tokens", seen.usage.completion_tokens);
        if seen.usage.cached_tokens > 0 {
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", seen.usage.cached_tokens);
        }
        span.set_attribute("gw.cost_micros", seen.cost_micros);
        span.set_attribute("gw.usage.estimated", seen.estimated);
        span.set_attribute("gw.status", i64::from(seen.status));
        if let Some(first) = seen.answer.first_output {
            let ttft = first.saturating_duration_since(seen.started).as_secs_f64();
            span.set_attribute("gw.time_to_first_token_s", ttft);
        }
        // The answer's own word, else the name the channel was asked for.
        let model = seen.answer.model.clone().or_else(|| traced.trail.fields().upstream_model);
        if let Some(model) = model {
            span.set_attribute("gen_ai.response.model", model);
        }
        if !seen.answer.finish_reasons.is_empty() {
            let reasons: Vec<StringValue> = seen.answer.finish_reasons.iter().map(|r| r.clone().into()).collect();
            span.set_attribute("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons)));
        }
    });
}

/// The GenAI operation `seen` was (`other` where none fits).
fn operation_of(seen: &Seen<'_>) -> &'static str {
    operation(seen.endpoint).unwrap_or("other")
}

/// Attributes for a metric recorded about `seen`.
fn labels(seen: &Seen<'_>) -> Vec<KeyValue> {
    vec![
        KeyValue::new("gen_ai.operation.name", operation_of(seen)),
        KeyValue::new("gen_ai.request.model", seen.model.to_owned()),
        KeyValue::new("gw.channel", seen.channel.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_genai_operations() {
        assert_eq!(operation("/v1/chat/completions"), Some("chat"));
        assert_eq!(operation("/v1/messages"), Some("chat"));
        assert_eq!(operation("/v1beta/models:streamGenerateContent"), Some("chat"));
        assert_eq!(operation("/v1/embeddings"), Some("embeddings"));
        assert_eq!(operation("/v1/images/generations"), Some("generate_content"));
        assert_eq!(operation("/v1/models"), None);
    }
}
