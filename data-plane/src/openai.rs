//! The OpenAI chat request as far as the proxy must understand it:
//! validating it and rewriting only what it must (the model name, the
//! stream's usage option). Bodies are otherwise passed through as bytes.

use bytes::Bytes;

use crate::{error::ProxyError, json_body::JsonBody};

/// A validated `POST /v1/chat/completions` body.
#[derive(Debug)]
pub struct ChatRequest {
    /// The body, read as its top-level fields.
    json: JsonBody,
    /// The requested model.
    pub model: String,
    /// Whether the client asked for a streamed (SSE) answer.
    pub stream: bool,
    /// Whether the client itself asked for `stream_options.include_usage`.
    pub client_wants_usage: bool,
    /// `max_completion_tokens` (or the older `max_tokens`), if set.
    pub max_output_tokens: Option<i64>,
}

// === impl ChatRequest ===

impl ChatRequest {
    /// Validates `body`: a JSON object with a non-empty string `model` and an
    /// array `messages`.
    pub fn parse(body: Bytes) -> Result<ChatRequest, ProxyError> {
        let json = JsonBody::parse(body)?;
        let model = json.value::<String>("model").filter(|m| !m.is_empty()).ok_or(ProxyError::MissingField("model"))?;
        if !json.field_bytes("messages").is_some_and(|v| v.starts_with(b"[")) {
            return Err(ProxyError::MissingField("messages"));
        }
        let stream = json.is_true("stream");
        let client_wants_usage = json.wants_usage();
        let number = |name: &str| json.value::<i64>(name);
        let max_output_tokens = number("max_completion_tokens").or_else(|| number("max_tokens"));
        Ok(ChatRequest { json, model, stream, client_wants_usage, max_output_tokens })
    }

    /// Size of the client's body in bytes.
    pub fn len(&self) -> usize {
        self.json.len()
    }

    /// The body read as its top-level fields.
    pub fn json(&self) -> &JsonBody {
        &self.json
    }

    /// The client's body as it arrived.
    pub fn body(&self) -> &Bytes {
        self.json.raw()
    }

    /// The body to send upstream: the client's bytes, except `model` becomes
    /// `upstream_model` and a streamed request always asks for usage.
    pub fn upstream_body(&self, upstream_model: &str) -> Bytes {
        let rename = (upstream_model != self.model).then_some(upstream_model);
        self.json.rewrite(rename, self.stream && !self.client_wants_usage)
    }
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

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config())]

        #[test]
        fn any_body_is_parsed_or_refused_with_a_4xx(body in crate::fuzz::body()) {
            if let Err(error) = ChatRequest::parse(Bytes::from(body)) {
                crate::fuzz::assert_client_error(&error)?;
            }
        }
    }
}
