//! `POST /v1/messages`: the messages dialect of chat. Same pipeline as chat
//! completions (auth, access checks, rate limit, model routing, failover,
//! metering), then validation of what the messages API requires: the
//! version header (`compat-version` or `anthropic-version`), a `model`, an
//! integer `max_tokens` and a well-formed `messages` array. Each attempt
//! speaks its channel's dialect (see `upstream`); every error is in the
//! messages shape.

use std::{sync::Arc, time::Instant};

use axum::{
    extract::{Request, State},
    response::Response,
};
use bytes::Bytes;
use serde_json::Value;

use crate::{
    auth::Access,
    error::{self, ProxyError, Shape},
    failover, proxy,
    server::{App, RequestId},
    usage::Charge,
};

mod relay;
mod upstream;

use upstream::MessagesCall;
pub use upstream::chat as chat_to_messages_channel;

/// The endpoint usage records name.
const ENDPOINT: &str = "/v1/messages";

/// Handles `POST /v1/messages`; every failure is rendered in the messages
/// error shape.
pub async fn messages(State(app): State<Arc<App>>, request: Request) -> Response {
    let request_id = request.extensions().get::<RequestId>().cloned().unwrap_or_default();
    match handle(&app, &request_id, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(request_id = %request_id.0, reason = error.reason(), "request refused");
            error::render_as(&error, &request_id.0, Shape::Messages)
        }
    }
}

async fn handle(app: &App, request_id: &RequestId, request: Request) -> Result<Response, ProxyError> {
    let started = Instant::now();
    let snapshot = app.snapshot.load_full();
    let (parts, body) = request.into_parts();
    let caller = proxy::authorize_request(app, &snapshot, &parts, Access::Spend)?;
    app.limits.check(&caller).await?;
    if !parts.headers.contains_key("anthropic-version") && !parts.headers.contains_key("compat-version") {
        return Err(ProxyError::MissingVersionHeader);
    }
    let raw = proxy::read_body(body, &parts.headers).await?;
    let call = parse(raw, parts.headers, parts.uri.query().map(str::to_owned))?;
    let (model, candidates) = proxy::route(&snapshot, &caller, &call.model)?;
    let charge = Charge::new(&request_id.0, &caller, model.clone(), ENDPOINT, started);
    let (call, charge) = (&call, &charge);
    failover::run(&app.upstreams, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        upstream::messages(app, channel, call, charge)
    })
    .await
}

/// Validates a messages body: a JSON object with a non-empty string
/// `model`, a non-negative integer `max_tokens`, and a `messages` array of
/// objects each with a `role` of `user` or `assistant` and a string or
/// array `content`.
fn parse(raw: Bytes, headers: axum::http::HeaderMap, query: Option<String>) -> Result<MessagesCall, ProxyError> {
    let json = serde_json::from_slice::<Value>(&raw).map_err(|e| ProxyError::InvalidJson(e.to_string()))?;
    if !json.is_object() {
        return Err(ProxyError::InvalidJson("the body must be a JSON object".into()));
    }
    let model = json
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or(ProxyError::MissingField("model"))?
        .to_owned();
    match json.get("max_tokens") {
        None | Some(Value::Null) => return Err(ProxyError::MissingField("max_tokens")),
        Some(v) if !v.is_u64() => {
            let reason = "must be a non-negative integer".to_owned();
            return Err(ProxyError::InvalidField { field: "max_tokens", reason });
        }
        Some(_) => {}
    }
    let messages = match json.get("messages") {
        None | Some(Value::Null) => return Err(ProxyError::MissingField("messages")),
        Some(Value::Array(messages)) => messages,
        Some(_) => {
            let reason = "must be an array of messages".to_owned();
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
    };
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        let content = message.get("content");
        if !matches!(role, Some("user" | "assistant")) {
            let reason = format!("messages[{i}].role must be \"user\" or \"assistant\"");
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
        if !matches!(content, Some(Value::String(_) | Value::Array(_))) {
            let reason = format!("messages[{i}].content must be a string or an array of content blocks");
            return Err(ProxyError::InvalidField { field: "messages", reason });
        }
    }
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(MessagesCall { raw, json, model, stream, headers, query })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::{body::Body, http::StatusCode};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        server::{
            router,
            tests::{KEY, app, json_body, policy},
        },
        snapshot::tests as fx,
    };

    type Headers<'a> = &'a [(&'a str, &'a str)];

    async fn post(headers: Headers<'_>, body: &str) -> (StatusCode, Value) {
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let mut request = axum::http::Request::post("/v1/messages").header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = router(app).oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = response.status();
        (status, json_body(response).await)
    }

    #[tokio::test]
    async fn requests_missing_what_the_messages_api_requires_are_400_in_its_shape() {
        let ok = r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
        let cases: [(Headers<'_>, &str, &str); 7] = [
            (&[("x-api-key", KEY)], ok, "header \"anthropic-version\" (or \"compat-version\") is required"),
            (&[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], "{", "invalid JSON body"),
            (
                &[("authorization", "Bearer sk-models-test"), ("compat-version", "2023-06-01")],
                r#"{"model":"gpt-a","messages":[]}"#,
                "field \"max_tokens\" is required",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":"5","messages":[]}"#,
                "field \"max_tokens\" is invalid: must be a non-negative integer",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5}"#,
                "field \"messages\" is required",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"system","content":"x"}]}"#,
                "messages[0].role must be",
            ),
            (
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                r#"{"model":"gpt-a","max_tokens":5,"messages":[{"role":"user"}]}"#,
                "messages[0].content must be",
            ),
        ];
        for (headers, body, message) in cases {
            let (status, json) = post(headers, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {json}");
            assert_eq!(json["type"], "error");
            assert_eq!(json["error"]["type"], "invalid_request_error");
            let text = json["error"]["message"].as_str().unwrap();
            assert!(text.contains(message), "{text:?} lacks {message:?}");
            assert!(text.contains("(request id: "), "{text}");
        }
    }

    #[tokio::test]
    async fn auth_comes_first_and_is_in_the_messages_shape() {
        let (status, json) = post(&[], "{}").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(json["error"]["type"], "authentication_error");
    }

    #[test]
    fn client_headers_reach_a_messages_channel_without_the_client_key() {
        let mut client = axum::http::HeaderMap::new();
        client.insert("x-api-key", "sk-client".parse().unwrap());
        client.insert("authorization", "Bearer sk-client".parse().unwrap());
        client.insert("anthropic-beta", "tools-2024".parse().unwrap());
        client.insert("x-vendor-trace", "abc".parse().unwrap());
        client.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        client.insert("compat-version", "2024-01-01".parse().unwrap());
        let headers = upstream::anthropic_headers(&client);
        assert_eq!(headers["anthropic-version"], "2024-01-01");
        assert_eq!(headers["anthropic-beta"], "tools-2024");
        assert_eq!(headers["x-vendor-trace"], "abc");
        assert!(!headers.contains_key("x-api-key") && !headers.contains_key("authorization"));
        assert!(!headers.contains_key("x-forwarded-for"));
        let headers = upstream::anthropic_headers(&axum::http::HeaderMap::new());
        assert_eq!(headers["anthropic-version"], upstream::DEFAULT_VERSION);
    }
}
