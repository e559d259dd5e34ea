//! `POST /v1/chat/completions`: the request pipeline from the snapshot load
//! to the upstream's last byte. Checks run in the order of the error
//! catalogue; one snapshot is loaded per request so a request never sees half
//! an update. Upstream attempts fail over between channels (`failover`) until
//! a response may go to the client. Non-streamed answers pass through as
//! bytes, streamed ones event by event; both are metered exactly once.

use std::{net::SocketAddr, sync::Arc, time::Instant};

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;

use crate::{
    auth::{self, Access, Caller},
    client_ip::client_ip,
    domain::{Channel, Model},
    error::{self, ProxyError},
    failover, now_unix, openai,
    openai::ChatRequest,
    server::{App, RequestId},
    snapshot::Snapshot,
    sse::{self, SseFilter},
    upstream,
    usage::{Charge, Meter},
};

/// Largest request body accepted (413 above).
pub const MAX_BODY_BYTES: usize = 32 << 20;
/// Most of a refused body read and dropped before answering 413.
const DISCARD_LIMIT: usize = 4 * MAX_BODY_BYTES;
/// Longest time spent draining a refused body.
const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(10);
/// Most of an upstream error body read to find its message.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 << 10;
const ENDPOINT: &str = "/v1/chat/completions";

/// Handles `POST /v1/chat/completions`; every failure goes through
/// `error::render`.
pub async fn chat_completions(State(app): State<Arc<App>>, request: Request) -> Response {
    let request_id = request.extensions().get::<RequestId>().cloned().unwrap_or_default();
    match chat(&app, &request_id, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(request_id = %request_id.0, reason = error.reason(), "request refused");
            error::render(&error, &request_id.0)
        }
    }
}

/// Runs checks 1–6 (auth) for `request`, returning the caller.
pub fn authorize_request(
    app: &App,
    snapshot: &Snapshot,
    parts: &axum::http::request::Parts,
    access: Access,
) -> Result<Caller, ProxyError> {
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let ip = client_ip(peer, &parts.headers, &app.trusted_proxies);
    auth::authorize(snapshot, app.usage.overlay(), &parts.headers, ip, now_unix(), access)
}

async fn chat(app: &App, request_id: &RequestId, request: Request) -> Result<Response, ProxyError> {
    let started = Instant::now();
    let snapshot = app.snapshot.load_full();
    let (parts, body) = request.into_parts();
    let caller = authorize_request(app, &snapshot, &parts, Access::Spend)?;
    app.limits.check(&caller).await?;
    let body = read_body(body, &parts.headers).await?;
    let chat = ChatRequest::parse(body)?;
    let (model, candidates) = route(&snapshot, &caller, &chat.model)?;
    let charge = Charge::new(&request_id.0, &caller, model.clone(), ENDPOINT, started);
    let (chat, charge) = (&chat, &charge);
    failover::run(&app.upstreams, candidates, |channel| {
        let charge = charge.on_channel(&channel);
        forward(app, channel, chat, charge)
    })
    .await
}

/// Reads the body, refusing more than `MAX_BODY_BYTES`.
pub(crate) async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, ProxyError> {
    let too_large = ProxyError::BodyTooLarge { limit: MAX_BODY_BYTES };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        discard(&mut stream).await;
        return Err(too_large);
    }
    let capacity = declared.map_or(0, |n| usize::try_from(n).unwrap_or(0));
    let mut buf = BytesMut::with_capacity(capacity);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ProxyError::BodyRead)?;
        if buf.len() + chunk.len() > MAX_BODY_BYTES {
            discard(&mut stream).await;
            return Err(too_large);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Reads and drops what is left of a refused body, so the client (which is
/// still sending) reads the 413 instead of a reset connection. Bounded by
/// `DISCARD_LIMIT` bytes and `DISCARD_TIME`; past either the connection is
/// dropped.
async fn discard(stream: &mut axum::body::BodyDataStream) {
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > DISCARD_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIME, drain).await;
}

/// Step 8: the model must be in the token's allowlist (if any) and the
/// catalogue, and some enabled channel must serve it to the caller's group.
pub(crate) fn route<'s>(
    snapshot: &'s Snapshot,
    caller: &Caller,
    model: &str,
) -> Result<(&'s Arc<Model>, &'s [Arc<Channel>]), ProxyError> {
    let allowlist = &caller.token.models;
    if !allowlist.is_empty() && !allowlist.iter().any(|m| m == model) {
        return Err(ProxyError::ModelForbidden { model: model.to_owned() });
    }
    let entry = snapshot.model(model).ok_or_else(|| ProxyError::ModelNotFound { model: model.to_owned() })?;
    let candidates = snapshot.channels(&caller.group.name, model);
    if candidates.is_empty() {
        return Err(no_channel(caller, model));
    }
    Ok((entry, candidates))
}

fn no_channel(caller: &Caller, model: &str) -> ProxyError {
    ProxyError::NoChannel { group: caller.group.name.clone(), model: model.to_owned() }
}

/// One attempt: sends `chat` to `channel` and turns the answer into the
/// client's response. Fails, without having sent the client anything, on an
/// upstream error status, a transport failure, or a plain answer whose body
/// breaks off; a streamed answer is committed once its headers arrived.
async fn forward(app: &App, channel: Arc<Channel>, chat: &ChatRequest, charge: Charge) -> Result<Response, ProxyError> {
    if channel.kind == crate::domain::ChannelKind::Anthropic {
        return crate::messages::chat_to_messages_channel(app, channel, chat, charge).await;
    }
    let body = chat.upstream_body(channel.upstream_model(&chat.model));
    let response = app.upstreams.chat(&channel, body, chat.stream).await?;
    let status = response.status();
    if !status.is_success() {
        let bytes = read_capped(response, MAX_ERROR_BODY_BYTES).await;
        let message = upstream::mask_channel(&openai::upstream_error_message(status, &bytes), &channel);
        tracing::warn!(channel = %channel.id, status = status.as_u16(), %message, "upstream refused the request");
        return Err(ProxyError::UpstreamStatus { status, message });
    }
    let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let is_sse = content_type
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
    let mut meter = Meter::new(charge, app.usage.clone(), chat.len());
    if is_sse {
        let idle = app.upstreams.idle_timeout(&channel);
        let body =
            sse::metered(Box::pin(response.bytes_stream()), SseFilter::new(chat.client_wants_usage), meter, idle);
        return Ok(build(status, content_type, Body::from_stream(body), true));
    }
    let bytes = match app.upstreams.read_body(&channel, response).await {
        Ok(bytes) => bytes,
        Err(error) => {
            meter.cancel();
            return Err(error);
        }
    };
    if let Some(usage) = openai::response_usage(&bytes) {
        meter.observe(usage);
    }
    meter.finish(status.as_u16());
    Ok(build(status, content_type, Body::from(bytes), false))
}

/// The first `cap` bytes of `response`'s body (fewer if it fails midway).
pub(crate) async fn read_capped(response: reqwest::Response, cap: usize) -> Bytes {
    let mut buf = BytesMut::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() >= cap {
            break;
        }
    }
    buf.freeze()
}

pub(crate) fn build(status: StatusCode, content_type: Option<HeaderValue>, body: Body, streaming: bool) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let default_type = if streaming { "text/event-stream" } else { "application/json" };
    headers.insert(header::CONTENT_TYPE, content_type.unwrap_or(HeaderValue::from_static(default_type)));
    if streaming {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // Tells nginx-style proxies in front of us not to buffer the stream.
        headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use axum::http::Request;
    use tower::ServiceExt as _;

    use super::*;
    use crate::{
        domain::Token,
        server::{
            router,
            tests::{KEY, app, json_body, policy},
        },
        snapshot::tests as fx,
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
        let token = Token { models: vec!["gpt-a".into(), "gpt-off".into(), "ghost".into()], ..fx::token("t1", KEY) };
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
}
