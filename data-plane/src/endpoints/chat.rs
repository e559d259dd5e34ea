//! `POST /v1/chat/completions`: admit, parse and validate the chat body,
//! route, then attempts over the channels: passthrough to OpenAI-compatible
//! channels (bytes as they came, the model mapped, usage asked for),
//! translation to messages-native ones (`provider::dialect::chat`).
//! Non-streamed answers pass through as bytes, streamed ones event by
//! event; both are metered exactly once.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Request, State},
    http::header,
    response::Response,
};

use crate::{
    error::ProxyError,
    meter::{
        Charge, Meter, answer,
        pump::{Events, primed},
        sse::SseFilter,
    },
    openai::ChatRequest,
    pipeline::{self, App},
    policy::auth::Access,
    policy::domain::{Channel, ChannelKind},
    provider,
};

const ENDPOINT: &str = "/v1/chat/completions";

/// Handles `POST /v1/chat/completions`.
pub async fn handle(State(app): State<Arc<App>>, request: Request) -> Result<Response, ProxyError> {
    let (admitted, body) = pipeline::admit(&app, request, Access::Spend).await?;
    let chat = ChatRequest::parse(admitted.read_body(body).await?)?;
    let (model, candidates) = pipeline::route(&admitted, &chat.model, ENDPOINT)?;
    let bound = pipeline::Bound::tokens(chat.len(), chat.max_output_tokens);
    let charge = pipeline::reserve(&app, &admitted, model.clone(), ENDPOINT, bound).await?;
    let (app, chat, charge) = (&*app, &chat, &charge);
    let scope = admitted.scope_in_conversation(app, Some(chat.json()), &chat.model);
    if chat.stream {
        pipeline::keepalive::arm(&admitted);
    }
    pipeline::attempts(&app.upstreams, scope, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        app.usage.in_flight(charge, chat.len(), |charge| forward(app, channel, chat, charge))
    })
    .await
}

/// One attempt: sends `chat` to `channel` and turns the answer into the
/// client's response. Fails, without having sent the client anything, on an
/// upstream error status, a transport failure, or a plain answer whose body
/// breaks off; a streamed answer is committed once its first token came
/// (`pump::primed`), within the channel's first-byte timeout.
async fn forward(app: &App, channel: Arc<Channel>, chat: &ChatRequest, charge: Charge) -> Result<Response, ProxyError> {
    if !matches!(channel.kind, ChannelKind::OpenAi | ChannelKind::Azure) {
        // Boxed: the translating call is large, and this future would
        // otherwise be as large for every channel.
        return Box::pin(provider::dialect::chat(app.attempt(), channel, chat, charge)).await;
    }
    let body = chat.upstream_body(channel.upstream_model(&chat.model));
    let sent = tokio::time::Instant::now();
    let response = app.upstreams.chat(&channel, channel.upstream_model(&chat.model), body, chat.stream).await?;
    let response = provider::accept(&app.upstreams, &channel, response).await?;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let mut meter = Meter::new(charge, app.usage.clone(), chat.len());
    meter.estimate_prompt_from(chat.body().clone());
    if provider::is_sse(response.headers()) {
        let idle = app.upstreams.idle_timeout(&channel);
        let filter = Events::new(SseFilter::new(chat.client_wants_usage));
        let first_token = app.upstreams.first_token_deadline(&channel, sent);
        let upstream = Box::pin(response.bytes_stream());
        // Boxed: waiting for the first token is a large future, and this
        // one would otherwise be as large for plain answers too.
        let body = Box::pin(primed(upstream, filter, Some(meter), idle, status.as_u16(), first_token)).await?;
        return Ok(provider::reply(status, content_type, Body::from_stream(body), true));
    }
    let bytes = match app.upstreams.read_body(&channel, response).await {
        Ok(bytes) => bytes,
        Err(error) => {
            meter.cancel();
            return Err(error);
        }
    };
    meter.answered(&bytes);
    match answer::response_usage(&bytes) {
        Some(usage) => meter.observe(usage),
        None => meter.add_text(&answer::answer_text(&bytes)),
    }
    // The record is on the spool before the client can have the answer.
    meter.finish(status.as_u16()).wait().await;
    Ok(provider::reply(status, content_type, Body::from(bytes), false))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        http::{
            router,
            tests::{KEY, app, json_body, policy},
        },
        pipeline::body::MAX_BODY_BYTES,
        policy::domain::Restrictions,
        policy::snapshot::tests as fx,
    };

    async fn post(app: Arc<App>, key: Option<&str>, body: &str, length: Option<u64>) -> (StatusCode, Response) {
        let mut request = Request::post("/v1/chat/completions").header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        if let Some(length) = length {
            request = request.header("content-length", length);
        }
        let response = router(app).oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        (response.status(), response)
    }

    async fn refusal(app: Arc<App>, key: Option<&str>, body: &str) -> (StatusCode, String) {
        let (status, response) = post(app, key, body, None).await;
        assert_eq!(response.headers()["x-should-retry"], "false", "{status}");
        let message = json_body(response).await["error"]["message"].as_str().unwrap().to_owned();
        let (text, _) = message.rsplit_once(" (request id: ").expect("message without request id");
        (status, text.to_owned())
    }

    #[tokio::test]
    async fn requests_are_refused_in_catalogue_order() {
        let models = vec!["gpt-a".into(), "gpt-off".into(), "ghost".into()];
        let token = fx::token("t1", KEY).restricted(Restrictions { models, ..Restrictions::default() });
        let app = app(policy(token, 1_000_000));
        let cases: [(Option<&str>, &str, u16, &str); 8] = [
            (None, "{bad", 401, "未提供令牌"),
            (Some(KEY), "{bad", 400, "invalid JSON body: key must be a string at line 1 column 2"),
            (Some(KEY), r#"{"messages":[]}"#, 400, r#"field "model" is required"#),
            (Some(KEY), r#"{"model":"gpt-a"}"#, 400, r#"field "messages" is required"#),
            (Some(KEY), r#"{"model":"gpt-b","messages":[]}"#, 403, "该令牌无权访问模型 gpt-b"),
            (Some(KEY), r#"{"model":"ghost","messages":[]}"#, 404, "模型不存在: ghost"),
            (Some(KEY), r#"{"model":"gpt-off","messages":[]}"#, 503, "分组 default 下模型 gpt-off 无可用渠道"),
            (Some("sk-wrong"), r#"{"model":"gpt-a","messages":[]}"#, 401, "无效的令牌"),
        ];
        for (key, body, status, message) in cases {
            let (got_status, got_message) = refusal(app.clone(), key, body).await;
            assert_eq!((got_status.as_u16(), got_message.as_str()), (status, message), "{body}");
        }
    }

    #[tokio::test]
    async fn oversized_bodies_are_refused_with_413() {
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let (status, _) = post(app.clone(), Some(KEY), "{}", Some(MAX_BODY_BYTES as u64 + 1)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let big = format!(r#"{{"model":"gpt-a","messages":[],"pad":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
        let (status, _) = post(app, Some(KEY), &big, None).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn unreachable_upstream_is_a_502_that_names_no_secret() {
        // The fixture channels point at 127.0.0.1:1, where nothing listens.
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let (status, response) = post(app, Some(KEY), r#"{"model":"gpt-a","messages":[]}"#, None).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        let body = json_body(response).await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("upstream connection failed (request id: "), "{message}");
        assert!(!message.contains("key-c1") && !message.contains("127.0.0.1"));
    }

    #[tokio::test]
    async fn an_endpoint_that_does_not_fit_the_models_category_is_refused_before_any_upstream() {
        let app = app(policy(fx::token("t1", KEY), 1_000_000));
        let request = Request::post("/v1/embeddings")
            .header("authorization", format!("Bearer {KEY}"))
            .body(Body::from(r#"{"model":"gpt-a","input":"x"}"#))
            .unwrap();
        let response = router(app).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = json_body(response).await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("gpt-a is not an embedding model"), "{message}");
        assert!(message.contains("/v1/embeddings"), "{message}");
        assert_eq!(body["error"]["code"], "model_not_supported");
    }
}
