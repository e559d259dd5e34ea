//! Both chat dialects through both channel types, driven by the official
//! Anthropic and OpenAI Python SDKs (`tests/sdk/anthropic_messages.py`, run
//! with `GW_PYTHON`): `/v1/messages` passed through to a messages-native
//! (`anthropic`) channel and translated to an OpenAI one, `/v1/chat/completions`
//! translated to a messages-native channel, tool use, the messages errors,
//! and the usage each call bills.

use crate::support;

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::{self, eventually},
    mock::messages::ToolUse,
    mock::upstream::{MockUpstream, Recorded, Script},
};
use serde_json::{Value, json};
use support::{Gateway, MODEL, UPSTREAM_KEY};

/// gpt-4o at $2.5 / $10 per 1M tokens, ratio 1, the mock's 11 prompt + 7
/// completion tokens: ceil(11 × 2.5 + 7 × 10) = 98 µ$ per request.
const COST: i64 = 98;
const START_BALANCE: i64 = 100_000_000;
const REPLY: &str = "Hello from the mock upstream";

/// Runs `anthropic_messages.py case` as `key`; returns its JSON summary.
async fn sdk(gw: &Gateway, case: &str, key: &str) -> Value {
    let host = format!("http://{}", gw.cluster.data_planes[0].addr);
    let env = [("GW_HOST", host.as_str()), ("GW_API_KEY", key), ("GW_MODEL", MODEL)];
    harness::sdk("anthropic_messages.py", &[case], &env).await
}

/// A gateway whose one channel, of `kind`, is the mock; `gpt-4o` maps to
/// `upstream-model` on it.
async fn gateway(upstream: &MockUpstream, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &["--type", kind, "--map", "gpt-4o=upstream-model"]).await;
    gw.synced().await;
    gw
}

/// Waits for `n` usage records and for the balance to have dropped by
/// exactly `n × COST`; returns the records.
async fn billed(gw: &Gateway, n: usize) -> Vec<Value> {
    let records = gw.wait_for_usage(n).await;
    let want = START_BALANCE - COST * i64::try_from(n).unwrap_or(0);
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (gw.balance().await == want).then_some(())
    })
    .await;
    records
}

fn assert_record(record: &Value, endpoint: &str, estimated: bool) {
    assert_eq!(record["endpoint"], endpoint, "{record}");
    assert_eq!(record["model"], MODEL, "{record}");
    assert_eq!(record["estimated"].as_bool().unwrap_or(false), estimated, "{record}");
    if !estimated {
        assert_eq!((record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()), (Some(11), Some(7)));
        assert_eq!(record["cost_micros"].as_i64(), Some(COST), "{record}");
    }
}

fn to_path<'a>(requests: &'a [Recorded], path: &str) -> Vec<&'a Recorded> {
    requests.iter().filter(|r| r.path == path).collect()
}

#[tokio::test]
async fn the_anthropic_sdk_passes_through_a_messages_channel_with_its_headers() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;

    let chat = sdk(&gw, "chat", &gw.key).await;
    assert_eq!(chat["type"], "message", "{chat}");
    assert_eq!(chat["text"], REPLY, "{chat}");
    assert_eq!(chat["streamed"], REPLY, "{chat}");
    assert_eq!(chat["stop_reason"], "end_turn");
    assert_eq!(chat["usage"], json!({"input_tokens": 11, "output_tokens": 7}));
    assert_eq!(chat["stream_usage"], json!({"input_tokens": 11, "output_tokens": 7}));
    assert_eq!(chat["requests"], 2, "{chat}");

    let beta = sdk(&gw, "beta", &gw.key).await;
    assert_eq!(beta["text"], REPLY, "{beta}");

    let requests = upstream.requests();
    let sent = to_path(&requests, "/v1/messages");
    assert_eq!(sent.len(), 3, "every call went to the messages API: {requests:?}");
    for request in &sent {
        assert_eq!(request.header("x-api-key"), Some(UPSTREAM_KEY), "the channel key, not the client's");
        assert_eq!(request.header("authorization"), None);
        assert_eq!(request.header("anthropic-version"), chat["versions"][0].as_str(), "the client's version");
        assert_eq!(request.header("x-vendor-trace"), Some("trace-42"));
        assert_eq!(request.body["model"], "upstream-model", "the model is mapped");
        assert!(!format!("{:?}", request.headers).contains(&gw.key), "the client key reached the upstream");
    }
    assert_eq!(sent[0].header("anthropic-beta"), Some("test-beta-2025-01-01"));
    assert_eq!(sent[0].body["system"], "Be brief.", "the body passes through");
    assert_eq!(sent[0].query, None);
    assert_eq!(sent[2].query.as_deref(), Some("beta=true"), "the beta client query string passes on: {beta}");
    assert!(sent[2].header("anthropic-beta").is_some_and(|b| b.contains("extra-beta-1")), "{:?}", sent[2].headers);

    let records = billed(&gw, 3).await;
    for record in &records {
        assert_record(record, "/v1/messages", false);
    }

    // Tool use: the SDK sees a ToolUseBlock, and its tool_result goes back.
    upstream.set_script(Script {
        tool_use: Some(ToolUse { name: None, input: json!({"city": "Paris"}) }),
        ..Script::default()
    });
    let tools = sdk(&gw, "tools", &gw.key).await;
    assert_eq!(tools["block_class"], "ToolUseBlock", "{tools}");
    assert_eq!(tools["tool"]["name"], "get_weather");
    assert_eq!(tools["tool"]["input"], json!({"city": "Paris"}));
    assert_eq!(tools["stop_reason"], "tool_use");
    let last = upstream.last_request().expect("the tool_result turn");
    let turn = &last.body["messages"][2]["content"][0];
    assert_eq!(turn["type"], "tool_result", "{}", last.body);
    assert_eq!(turn["tool_use_id"], tools["tool"]["id"]);
    billed(&gw, 5).await;
}

#[tokio::test]
async fn the_anthropic_sdk_is_translated_to_an_openai_channel() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;

    let chat = sdk(&gw, "chat", &gw.key).await;
    assert_eq!(chat["type"], "message", "{chat}");
    assert_eq!(chat["text"], REPLY, "{chat}");
    assert_eq!(chat["streamed"], REPLY, "{chat}");
    assert_eq!(chat["stop_reason"], "end_turn");
    assert_eq!(chat["stream_stop_reason"], "end_turn");
    assert_eq!(chat["usage"], json!({"input_tokens": 11, "output_tokens": 7}));
    assert_eq!(chat["stream_usage"], json!({"input_tokens": 11, "output_tokens": 7}));

    let requests = upstream.requests();
    let sent = to_path(&requests, "/v1/chat/completions");
    assert_eq!(sent.len(), 2, "{requests:?}");
    assert_eq!(sent[0].header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
    assert_eq!(sent[0].body["model"], "upstream-model");
    assert_eq!(sent[0].body["messages"][0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(sent[0].body["messages"][1]["role"], "user");
    assert_eq!(sent[1].body["stream"], true);
    assert_eq!(sent[1].body["stream_options"]["include_usage"], true, "streams always ask for usage");

    let result = sdk(&gw, "tool-result", &gw.key).await;
    assert_eq!(result["text"], REPLY, "{result}");
    let last = upstream.last_request().expect("the tool_result turn");
    let messages = last.body["messages"].as_array().cloned().unwrap_or_default();
    let call = messages.iter().find(|m| m["role"] == "assistant").expect("the assistant turn");
    assert_eq!(call["tool_calls"][0]["id"], "toolu_1", "{}", last.body);
    assert_eq!(call["tool_calls"][0]["function"]["name"], "get_weather");
    let tool = messages.iter().find(|m| m["role"] == "tool").expect("a tool message");
    assert_eq!(tool["tool_call_id"], "toolu_1");
    assert_eq!(tool["content"], "sunny");

    let records = billed(&gw, 3).await;
    for record in &records {
        assert_record(record, "/v1/messages", false);
    }
}

#[tokio::test]
async fn the_openai_sdk_chats_through_a_messages_channel() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;

    let chat = sdk(&gw, "openai", &gw.key).await;
    assert_eq!(chat["text"], REPLY, "{chat}");
    assert_eq!(chat["streamed"], REPLY, "{chat}");
    assert_eq!(chat["finish_reason"], "stop");
    assert_eq!(chat["stream_finish_reason"], "stop");
    assert_eq!(chat["usage"], json!({"prompt_tokens": 11, "completion_tokens": 7}));
    assert_eq!(chat["stream_usage"], json!({"prompt_tokens": 11, "completion_tokens": 7}));

    let requests = upstream.requests();
    let sent = to_path(&requests, "/v1/messages");
    assert_eq!(sent.len(), 2, "{requests:?}");
    for request in &sent {
        assert_eq!(request.header("x-api-key"), Some(UPSTREAM_KEY));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.body["model"], "upstream-model");
        assert_eq!(request.body["system"], "Be brief.", "{}", request.body);
    }
    assert_eq!(sent[0].body["max_tokens"], 64);

    // The raw JSON answer is a valid chat completion.
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]});
    let reply = gw.post(0, "/v1/chat/completions", Some(&gw.key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let completion = reply.json();
    gw_tests::schema::validate("CreateChatCompletionResponse", &completion).expect("a valid chat completion");
    assert_eq!(completion["choices"][0]["message"]["content"], REPLY);

    let records = billed(&gw, 3).await;
    for record in &records {
        assert_record(record, "/v1/chat/completions", false);
    }

    // An upstream stream without usage is counted locally and marked.
    upstream.set_script(Script { include_usage: false, ..Script::default() });
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let reply = gw.post(0, "/v1/chat/completions", Some(&gw.key), &body).await;
    assert_eq!(support::streamed_text(&reply.text), REPLY, "{}", reply.text);
    let records = gw.wait_for_usage(4).await;
    let newest = &records[0];
    assert_eq!(newest["estimated"], true, "{newest}");
    // "Hello from the mock upstream" is 5 tokens in gpt-4o's o200k_base.
    assert_eq!(newest["completion_tokens"], 5, "{newest}");
    assert!(newest["prompt_tokens"].as_i64().is_some_and(|n| n > 0), "{newest}");
}

#[tokio::test]
async fn messages_errors_are_400s_in_the_messages_shape_and_403_is_final() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let spent = pb::CreateTokenRequest { unlimited: false, quota_micros: 0, ..support::token(&gw.account) };
    let spent = gw.admin().create_token(spent).await.expect("token").into_inner().key;
    gw.synced().await;

    let result = sdk(&gw, "errors", &gw.key).await;
    let outcomes = result["outcomes"].as_array().cloned().unwrap_or_default();
    assert_eq!(outcomes.len(), 2, "{result}");
    for (outcome, needle) in outcomes.iter().zip(["max_tokens", "anthropic-version"]) {
        assert_eq!(outcome["outcome"], "BadRequestError", "{outcome}");
        assert_eq!(outcome["status"], 400);
        assert_eq!(outcome["should_retry"], "false");
        assert_eq!(outcome["body"]["type"], "error", "{outcome}");
        assert_eq!(outcome["body"]["error"]["type"], "invalid_request_error", "{outcome}");
        let message = outcome["body"]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{message}");
    }
    assert_eq!(result["requests"], 2, "400s are not retried: {result}");

    // Without any version header (raw HTTP: the SDK always sends one).
    let url = format!("http://{}/v1/messages", gw.cluster.data_planes[0].addr);
    let body = json!({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let response = gw.cluster.http().post(url).header("x-api-key", &gw.key).json(&body).send().await.expect("post");
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");

    let result = sdk(&gw, "quota", &spent).await;
    assert_eq!(result["outcome"], "PermissionDeniedError", "{result}");
    assert_eq!(result["status"], 403);
    assert_eq!(result["body"]["error"]["type"], "permission_error", "{result}");
    assert_eq!(result["requests"], 1, "the SDK retried a 403: {result}");
    assert_eq!(upstream.request_count(), 0, "no refused request reached the upstream");
}

/// POSTs `body` to `path` on the data plane as a messages client would.
async fn messages_post(gw: &Gateway, path: &str, body: &Value) -> (u16, Value) {
    let url = format!("http://{}{path}", gw.cluster.data_planes[0].addr);
    let response = gw
        .cluster
        .http()
        .post(url)
        .header("x-api-key", &gw.key)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14")
        .json(body)
        .send()
        .await
        .expect("request to the data plane");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// What Claude Code sends: `system` turns inside `messages`, `cache_control`
/// markers and a signed thinking block in the history.
fn agent_request() -> Value {
    json!({
        "model": MODEL,
        "max_tokens": 64,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "the user greets", "signature": "c2lnbmF0dXJl"},
                {"type": "text", "text": "Hello"}
            ]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "list the files"}
        ],
        "tools": [{"name": "ls", "description": "lists files", "input_schema": {"type": "object", "properties": {}}}]
    })
}

#[tokio::test]
async fn coding_agent_requests_pass_through_a_messages_channel_untouched_but_the_model() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let request = agent_request();
    let (status, answer) = messages_post(&gw, "/v1/messages?beta=true", &request).await;
    assert_eq!(status, 200, "{answer}");
    let sent: Recorded = upstream.last_request().expect("the upstream got the request");
    assert_eq!(sent.query.as_deref(), Some("beta=true"));
    let mut want = request.clone();
    want["model"] = json!("upstream-model");
    assert_eq!(
        sent.body, want,
        "only the mapped model changes: system turns, cache_control, thinking and its signature stay"
    );
    let header = |name: &str| sent.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(header("anthropic-beta").as_deref(), Some("claude-code-20250219,interleaved-thinking-2025-05-14"));
    assert_eq!(header("anthropic-version").as_deref(), Some("2023-06-01"));
    billed(&gw, 1).await;
}

#[tokio::test]
async fn coding_agent_requests_are_translated_for_an_openai_channel() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let (status, answer) = messages_post(&gw, "/v1/messages", &agent_request()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["type"], "message", "{answer}");
    let sent = upstream.last_request().expect("the upstream got the request");
    assert_eq!(sent.path, "/v1/chat/completions");
    let roles: Vec<&str> =
        sent.body["messages"].as_array().into_iter().flatten().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "system", "user"], "{}", sent.body);
    assert!(!sent.body.to_string().contains("c2lnbmF0dXJl"), "a thinking signature has no place in chat");
    billed(&gw, 1).await;
}

#[tokio::test]
async fn count_tokens_is_passed_through_or_counted_and_never_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let (status, answer) = messages_post(&gw, "/v1/messages/count_tokens?beta=true", &agent_request()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["input_tokens"], 11, "the upstream's count: {answer}");
    let sent = upstream.last_request().expect("the upstream got the request");
    assert_eq!((sent.path.as_str(), sent.query.as_deref()), ("/v1/messages/count_tokens", Some("beta=true")));
    assert_eq!(sent.body["model"], "upstream-model");

    let openai = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&openai, "openai").await;
    let (status, with_tools) = messages_post(&gw, "/v1/messages/count_tokens", &agent_request()).await;
    assert_eq!(status, 200, "{with_tools}");
    let mut bare = agent_request();
    bare.as_object_mut().map(|o| o.remove("tools"));
    let (_, without_tools) = messages_post(&gw, "/v1/messages/count_tokens", &bare).await;
    let (with_tools, without_tools) = (with_tools["input_tokens"].as_i64(), without_tools["input_tokens"].as_i64());
    assert!(without_tools.is_some_and(|n| n > 0), "{without_tools:?}");
    assert!(with_tools > without_tools, "tools are counted: {with_tools:?} vs {without_tools:?}");
    assert!(openai.requests().is_empty(), "counted here, not upstream");
    assert_eq!(gw.balance().await, START_BALANCE, "counting tokens is free");
}
