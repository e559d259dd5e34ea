//! The OpenAI wire format as far as the proxy must understand it: validating
//! a chat request and rewriting only what it must (the model name, the
//! stream's usage option), reading usage from a response, and reading an
//! upstream's error message. Bodies are otherwise passed through as bytes.

use std::fmt;

use bytes::Bytes;
use serde::{
    Deserialize,
    de::{MapAccess, Visitor},
};
use serde_json::{Value, value::RawValue};

use crate::{error::ProxyError, pricing::Usage};

/// A validated `POST /v1/chat/completions` body.
#[derive(Debug)]
pub struct ChatRequest {
    raw: Bytes,
    /// Top-level fields in their original order, values verbatim.
    fields: Vec<(String, Box<RawValue>)>,
    /// The requested model.
    pub model: String,
    /// Whether the client asked for a streamed (SSE) answer.
    pub stream: bool,
    /// Whether the client itself asked for `stream_options.include_usage`.
    pub client_wants_usage: bool,
}

/// Top-level fields of a JSON object, in order, values kept as raw JSON.
pub(crate) struct OrderedFields(pub(crate) Vec<(String, Box<RawValue>)>);

/// The parts of a response (or stream chunk) that metering reads.
#[derive(Debug, Default, Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<i64>,
    #[serde(default)]
    completion_tokens: Option<i64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<i64>,
}

/// A streamed chunk, as far as usage stripping needs it.
#[derive(Debug, Deserialize)]
struct ChunkProbe {
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    usage: Option<UsageJson>,
}

// === impl ChatRequest ===

impl ChatRequest {
    /// Validates `body`: a JSON object with a non-empty string `model` and an
    /// array `messages`.
    pub fn parse(body: Bytes) -> Result<ChatRequest, ProxyError> {
        let OrderedFields(fields) =
            serde_json::from_slice(&body).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
        let field = |name: &str| fields.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.get());
        let model = field("model")
            .and_then(|v| serde_json::from_str::<String>(v).ok())
            .filter(|m| !m.is_empty())
            .ok_or(ProxyError::MissingField("model"))?;
        if !field("messages").is_some_and(|v| v.starts_with('[')) {
            return Err(ProxyError::MissingField("messages"));
        }
        let stream = field("stream") == Some("true");
        let client_wants_usage = field("stream_options")
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            .is_some_and(|v| v.get("include_usage") == Some(&serde_json::Value::Bool(true)));
        Ok(ChatRequest { raw: body, fields, model, stream, client_wants_usage })
    }

    /// Size of the client's body in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// The client's body as it arrived.
    pub fn body(&self) -> &Bytes {
        &self.raw
    }

    /// The body to send upstream: the client's bytes, except `model` becomes
    /// `upstream_model` and a streamed request always asks for usage.
    pub fn upstream_body(&self, upstream_model: &str) -> Bytes {
        let rename = upstream_model != self.model;
        let force_usage = self.stream && !self.client_wants_usage;
        if !rename && !force_usage {
            return self.raw.clone();
        }
        let mut out = String::with_capacity(self.raw.len() + 64);
        out.push('{');
        let mut saw_options = false;
        for (key, value) in &self.fields {
            if out.len() > 1 {
                out.push(',');
            }
            push_json_string(&mut out, key);
            out.push(':');
            match key.as_str() {
                "model" if rename => push_json_string(&mut out, upstream_model),
                "stream_options" if force_usage => {
                    saw_options = true;
                    out.push_str(&with_include_usage(value.get()));
                }
                _ => out.push_str(value.get()),
            }
        }
        if force_usage && !saw_options {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(r#""stream_options":{"include_usage":true}"#);
        }
        out.push('}');
        Bytes::from(out)
    }
}

pub(crate) fn push_json_string(out: &mut String, s: &str) {
    // Serialising a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// `options` (raw JSON) with `include_usage: true`, other fields kept.
pub(crate) fn with_include_usage(options: &str) -> String {
    let mut map = match serde_json::from_str::<serde_json::Value>(options) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    map.insert("include_usage".into(), serde_json::Value::Bool(true));
    serde_json::Value::Object(map).to_string()
}

// === impl OrderedFields ===

impl<'de> Deserialize<'de> for OrderedFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldsVisitor;
        impl<'de> Visitor<'de> for FieldsVisitor {
            type Value = OrderedFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedFields, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(entry);
                }
                Ok(OrderedFields(fields))
            }
        }
        deserializer.deserialize_map(FieldsVisitor)
    }
}

// === impl UsageJson ===

impl UsageJson {
    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
        }
    }
}

/// The text of a chat completion's choices (content and tool-call
/// arguments), for an estimate when the answer reports no usage.
pub fn answer_text(body: &[u8]) -> String {
    let Ok(answer) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let mut text = String::new();
    for choice in answer.get("choices").and_then(|c| c.as_array()).into_iter().flatten() {
        let message = choice.get("message").or_else(|| choice.get("delta"));
        push_message_text(message, &mut text);
        if let Some(t) = choice.get("text").and_then(|t| t.as_str()) {
            text.push_str(t);
        }
    }
    text
}

/// Appends a chat message's (or delta's) content and tool-call arguments.
pub fn push_message_text(message: Option<&serde_json::Value>, text: &mut String) {
    let Some(message) = message else { return };
    if let Some(content) = message.get("content").and_then(|c| c.as_str()) {
        text.push_str(content);
    }
    for call in message.get("tool_calls").and_then(|c| c.as_array()).into_iter().flatten() {
        if let Some(arguments) = call.get("function").and_then(|f| f.get("arguments")).and_then(|a| a.as_str()) {
            text.push_str(arguments);
        }
    }
}

/// Usage of a non-streamed response body, if it reports any.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        usage: Option<UsageJson>,
    }
    serde_json::from_slice::<Body>(body).ok()?.usage.map(|u| u.usage())
}

/// What a stream chunk's JSON says: its usage, and whether it is the extra
/// usage-only chunk (`choices` empty) that `include_usage` adds.
pub fn chunk_usage(data: &[u8]) -> Option<(Usage, bool)> {
    let probe = serde_json::from_slice::<ChunkProbe>(data).ok()?;
    let usage = probe.usage?.usage();
    Some((usage, probe.choices.is_none_or(|c| c.is_empty())))
}

/// Token usage in an OpenAI usage object, in either naming: chat's
/// (`prompt_tokens`, `completion_tokens`, `prompt_tokens_details`) or the
/// responses API's (`input_tokens`, `output_tokens`, `input_tokens_details`).
/// `None` when it counts no tokens (e.g. `{"type":"duration"}`).
pub fn usage_of(usage: &Value) -> Option<Usage> {
    let int = |names: [&str; 2]| names.iter().find_map(|n| usage.get(*n).and_then(Value::as_i64));
    let prompt = int(["prompt_tokens", "input_tokens"]);
    let completion = int(["completion_tokens", "output_tokens"]);
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    let cached = ["prompt_tokens_details", "input_tokens_details"]
        .iter()
        .find_map(|n| usage.get(*n).and_then(|d| d.get("cached_tokens")).and_then(Value::as_i64));
    Some(Usage {
        prompt_tokens: prompt.unwrap_or(0),
        completion_tokens: completion.unwrap_or(0),
        cached_tokens: cached.unwrap_or(0),
    })
}

/// The answer text in one typed SSE event (`response.output_text.delta`,
/// function-call argument deltas), for estimates.
pub fn event_text(data: &[u8]) -> Option<String> {
    if !data.windows(6).any(|w| w == b".delta") {
        return None;
    }
    let event: Value = serde_json::from_slice(data).ok()?;
    event.get("delta").and_then(Value::as_str).map(str::to_owned)
}

/// Whether a typed SSE event ends the answer (`response.completed`,
/// `response.failed`, `response.incomplete`).
pub fn is_terminal_event(data: &[u8]) -> bool {
    let has = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
    has(b"\"response.completed\"") || has(b"\"response.failed\"") || has(b"\"response.incomplete\"")
}

/// Usage in one typed SSE event's data: `response.usage` (the responses
/// API's `response.completed`) or a top-level `usage`.
pub fn event_usage(data: &[u8]) -> Option<Usage> {
    let event: Value = serde_json::from_slice(data).ok()?;
    let usage = event.get("response").and_then(|r| r.get("usage")).filter(|u| u.is_object());
    usage.or_else(|| event.get("usage")).and_then(usage_of)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatRequest, ProxyError> {
        ChatRequest::parse(Bytes::from(body.to_owned()))
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(matches!(parse("{nope"), Err(ProxyError::InvalidJson(_))));
        let ProxyError::InvalidJson(reason) = parse("[1]").unwrap_err() else { panic!() };
        assert!(reason.contains("expected a JSON object"), "{reason}");
        assert_eq!(parse(r#"{"messages":[]}"#).unwrap_err(), ProxyError::MissingField("model"));
        assert_eq!(parse(r#"{"model":"","messages":[]}"#).unwrap_err(), ProxyError::MissingField("model"));
        assert_eq!(parse(r#"{"model":7,"messages":[]}"#).unwrap_err(), ProxyError::MissingField("model"));
        assert_eq!(parse(r#"{"model":"m"}"#).unwrap_err(), ProxyError::MissingField("messages"));
        assert_eq!(parse(r#"{"model":"m","messages":"hi"}"#).unwrap_err(), ProxyError::MissingField("messages"));
        let ok = parse(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(ok.model, "m");
        assert!(!ok.stream);
    }

    #[test]
    fn unchanged_body_passes_through_byte_for_byte() {
        let body = "{ \"model\" : \"m\",\n \"messages\": [], \"temperature\": 0.5 }";
        let req = parse(body).unwrap();
        assert_eq!(req.upstream_body("m"), body.as_bytes());
    }

    #[test]
    fn mapped_model_is_replaced_and_order_kept() {
        let req = parse(r#"{"temperature":1,"model":"m","messages":[{"a":1}]}"#).unwrap();
        assert_eq!(req.upstream_body("up-m"), r#"{"temperature":1,"model":"up-m","messages":[{"a":1}]}"#.as_bytes());
    }

    #[test]
    fn streams_always_ask_for_usage_and_remember_who_asked() {
        let req = parse(r#"{"model":"m","messages":[],"stream":true}"#).unwrap();
        assert!(req.stream && !req.client_wants_usage);
        let body: serde_json::Value = serde_json::from_slice(&req.upstream_body("m")).unwrap();
        assert_eq!(body["stream_options"]["include_usage"], true);

        let req = parse(r#"{"model":"m","messages":[],"stream":true,"stream_options":{"x":1}}"#).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&req.upstream_body("m")).unwrap();
        assert_eq!(body["stream_options"], serde_json::json!({"x":1,"include_usage":true}));

        let asked = r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#;
        let req = parse(asked).unwrap();
        assert!(req.client_wants_usage);
        assert_eq!(req.upstream_body("m"), asked.as_bytes());
    }

    #[test]
    fn usage_is_read_from_bodies_and_chunks() {
        let body = br#"{"id":"x","usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        assert_eq!(response_usage(body), Some(Usage { prompt_tokens: 10, completion_tokens: 5, cached_tokens: 4 }));
        assert_eq!(response_usage(br#"{"usage":null}"#), None);
        assert_eq!(response_usage(b"not json"), None);
        let extra = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#;
        assert_eq!(chunk_usage(extra).map(|(_, only)| only), Some(true));
        let inline = br#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}"#;
        assert_eq!(chunk_usage(inline).map(|(_, only)| only), Some(false));
        assert_eq!(chunk_usage(br#"{"choices":[{}],"usage":null}"#), None);
    }
}
