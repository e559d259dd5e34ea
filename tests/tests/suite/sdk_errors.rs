//! The official OpenAI and Anthropic Python SDKs against the gateway's
//! errors: they must not retry what the gateway marks final (403 quota, 503
//! `model_not_found`, 401, 404), the gateway's own retry must hide a passing
//! upstream 503 from them, and an upstream 429 that survives the gateway's
//! retries must surface as `RateLimitError`. Runs `tests/sdk/retries.py` with
//! `GW_PYTHON` (tests/run installs the pinned SDKs into a virtualenv).

use crate::support;

use gw_proto::pb;
use gw_tests::{
    harness,
    mock::upstream::{MockUpstream, Script},
};
use serde_json::Value;
use support::Gateway;

/// Runs `retries.py case` as `key`, letting the SDK retry `max_retries`
/// times; returns the script's JSON summary.
async fn sdk(gw: &Gateway, case: &str, key: &str, model: &str, max_retries: u32) -> Value {
    let host = format!("http://{}", gw.cluster.data_planes[0].addr);
    let retries = max_retries.to_string();
    let env = [("GW_HOST", host.as_str()), ("GW_API_KEY", key), ("GW_MODEL", model), ("GW_MAX_RETRIES", &retries)];
    harness::sdk("retries.py", &[case], &env).await
}

/// A gateway with one channel on `upstream`, whose replies say "sdk".
async fn gateway(upstream: &MockUpstream) -> Gateway {
    let gw = Gateway::start(1).await;
    upstream.set_script(Script { reply: "sdk".into(), ..Script::default() });
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    gw
}

/// Creates the token `request` describes; returns its key.
async fn token(gw: &Gateway, request: pb::CreateTokenRequest) -> String {
    gw.admin().create_token(request).await.expect("token create").into_inner().key
}

/// A token of the test account whose quota ($0) is spent.
fn spent(gw: &Gateway) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest { unlimited: false, quota_micros: 0, ..support::token(&gw.account) }
}

/// Creates the model `gpt-lonely`, which no channel serves.
async fn lonely_model(gw: &Gateway) {
    let model = pb::Model { id: "gpt-lonely".into(), category: "chat".into(), ..Default::default() };
    gw.admin().create_model(model).await.expect("model create");
}

#[tokio::test]
async fn the_openai_sdk_does_not_retry_a_spent_quota_or_a_model_without_channels() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    let spent = token(&gw, spent(&gw)).await;
    lonely_model(&gw).await;
    gw.synced().await;

    let result = sdk(&gw, "openai-chat", &spent, "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "PermissionDeniedError", "{result}");
    assert_eq!(result["status"], 403);
    assert_eq!(result["should_retry"], "false");
    assert_eq!(result["requests"], 1, "the SDK retried a 403: {result}");

    let result = sdk(&gw, "openai-chat", &gw.key, "gpt-lonely", 2).await;
    assert_eq!(result["outcome"], "InternalServerError", "{result}");
    assert_eq!(result["status"], 503);
    assert_eq!(result["body"]["code"], "model_not_found", "{result}");
    assert_eq!(result["requests"], 1, "the SDK retried a 503 model_not_found: {result}");
    assert_eq!(upstream.request_count(), 0);
}

#[tokio::test]
async fn the_gateway_retries_a_passing_upstream_503_so_the_openai_sdk_sees_success() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    gw.synced().await;
    for (case, seen) in [("openai-chat", 2), ("openai-stream", 4)] {
        upstream.fail_next(503, 1);
        let result = sdk(&gw, case, &gw.key, "gpt-4o", 2).await;
        assert_eq!(result["outcome"], "ok", "{case}: {result}");
        assert_eq!(result["text"], "sdk", "{case}: {result}");
        assert_eq!(result["requests"], 1, "{case}: the gateway, not the SDK, retried: {result}");
        assert_eq!(upstream.request_count(), seen, "{case}: one failed attempt, one good one");
    }
}

#[tokio::test]
async fn an_upstream_429_that_survives_retries_is_a_rate_limit_error_in_the_openai_sdk() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    gw.synced().await;
    upstream.fail_next(429, 1000);
    // One SDK retry: a 429 is worth retrying, so the SDK may and does.
    let result = sdk(&gw, "openai-chat", &gw.key, "gpt-4o", 1).await;
    assert_eq!(result["outcome"], "RateLimitError", "{result}");
    assert_eq!(result["status"], 429);
    assert!(result["should_retry"].is_null(), "{result}");
    assert_eq!(result["body"]["type"], "rate_limit_error", "{result}");
    let message = result["body"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("upstream error: scripted failure of the mock upstream (429"), "{message}");
    assert!(!message.contains(support::UPSTREAM_KEY) && !message.contains(&upstream.addr().to_string()));
    assert_eq!(result["requests"], 2, "{result}");
    assert_eq!(upstream.request_count(), 6, "three gateway attempts per SDK request");
}

#[tokio::test]
async fn the_anthropic_sdk_reads_messages_errors_and_does_not_retry_final_ones() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    let fenced =
        token(&gw, pb::CreateTokenRequest { allow_ips: vec!["10.9.8.7".into()], ..support::token(&gw.account) }).await;
    gw.synced().await;

    let result = sdk(&gw, "anthropic-unknown-messages-path", &gw.key, "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "NotFoundError", "{result}");
    assert_eq!(result["body"]["type"], "error", "{result}");
    assert_eq!(result["body"]["error"]["type"], "not_found_error", "{result}");
    assert_eq!(result["body"]["error"]["message"], "Invalid URL (POST /v1/messages/no-such-endpoint)");
    assert_eq!(result["requests"], 1, "{result}");

    let result = sdk(&gw, "anthropic-models-api-key", "sk-not-a-token-of-this-gateway", "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "AuthenticationError", "{result}");
    assert_eq!(result["status"], 401);
    assert_eq!(result["should_retry"], "false");
    assert_eq!(result["requests"], 1, "{result}");

    let result = sdk(&gw, "anthropic-models-bearer", &fenced, "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "PermissionDeniedError", "{result}");
    assert_eq!(result["status"], 403);
    assert_eq!(result["requests"], 1, "{result}");
}

#[tokio::test]
async fn the_anthropic_sdk_on_messages_gets_final_errors_once_and_gateway_retries_hide_a_passing_503() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream).await;
    let spent = token(&gw, spent(&gw)).await;
    lonely_model(&gw).await;
    gw.synced().await;

    let result = sdk(&gw, "anthropic-messages", &spent, "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "PermissionDeniedError", "{result}");
    assert_eq!(result["status"], 403);
    assert_eq!(result["body"]["error"]["type"], "permission_error", "{result}");
    assert_eq!(result["should_retry"], "false");
    assert_eq!(result["requests"], 1, "the SDK retried a 403: {result}");

    let result = sdk(&gw, "anthropic-messages", &gw.key, "gpt-lonely", 2).await;
    assert_eq!(result["status"], 503, "{result}");
    assert_eq!(result["should_retry"], "false", "{result}");
    assert_eq!(result["requests"], 1, "the SDK retried a 503 model_not_found: {result}");
    assert_eq!(upstream.request_count(), 0);

    upstream.fail_next(503, 1);
    let result = sdk(&gw, "anthropic-messages", &gw.key, "gpt-4o", 2).await;
    assert_eq!(result["outcome"], "ok", "{result}");
    assert_eq!(result["text"], "sdk", "{result}");
    assert_eq!(result["requests"], 1, "the gateway, not the SDK, retried: {result}");
    assert_eq!(upstream.request_count(), 2, "one failed attempt, one good one");

    upstream.fail_next(429, 1000);
    let result = sdk(&gw, "anthropic-messages", &gw.key, "gpt-4o", 0).await;
    assert_eq!(result["outcome"], "RateLimitError", "{result}");
    assert_eq!(result["status"], 429);
    assert_eq!(result["body"]["error"]["type"], "rate_limit_error", "{result}");
    assert!(result["should_retry"].is_null(), "{result}");
    assert_eq!(upstream.request_count(), 5, "three gateway attempts for the 429");
}
