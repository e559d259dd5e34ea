//! Streams that wait for their first token: keepalives in the client's
//! dialect while an upstream thinks, failover of a channel silent past its
//! first-byte timeout before anything but keepalives reached the client, an
//! error event when every channel stays silent, and the official SDKs
//! reading through it all. Real Redis, the control plane and a data plane
//! in-process (keepalives every 100 ms), upstreams that answer their
//! headers and opening events at once and then stay silent.

use crate::support;

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness,
    mock::{
        thinking::{Thinking, USAGE},
        upstream::MockUpstream,
    },
};
use serde_json::{Value, json};
use support::{Gateway, MODEL, Reply, chat_body, streamed_text};

/// The keepalive interval of the data plane under test.
const INTERVAL: Duration = Duration::from_millis(100);
/// A silence well past several intervals, short of every timeout.
const THINKING: Duration = Duration::from_millis(1_500);
/// Longer than any test waits: a channel that never answers.
const FOREVER: Duration = Duration::from_secs(600);
const KEEPALIVE: &str = ": keepalive\n\n";
const PING: &str = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

async fn gateway() -> Gateway {
    Gateway::start_with(1, |_, dp| dp.stream_keepalive = Some(INTERVAL)).await
}

fn messages_body(stream: bool) -> Value {
    json!({"model": MODEL, "max_tokens": 64, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

async fn messages(gw: &Gateway, body: &Value) -> Reply {
    let url = format!("http://{}/v1/messages", gw.cluster.data_planes[0].addr);
    let request = gw.cluster.http().post(url).header("x-api-key", &gw.key).header("anthropic-version", "2023-06-01");
    let response = request.json(body).send().await.expect("request to the data plane");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

/// The body split at its first byte that is not a keepalive `beat`: how
/// many beats came first, and the rest.
fn after_beats<'a>(text: &'a str, beat: &str) -> (usize, &'a str) {
    let mut rest = text;
    let mut beats = 0;
    while let Some(after) = rest.strip_prefix(beat) {
        (beats, rest) = (beats + 1, after);
    }
    (beats, rest)
}

/// The text of every `text_delta` of a messages stream.
fn messages_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The text of every `response.output_text.delta` of a responses stream.
fn typed_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter(|event| event["type"] == "response.output_text.delta")
        .filter_map(|event| event["delta"].as_str().map(str::to_owned))
        .collect()
}

/// The text of every part of a Gemini SSE stream.
fn gemini_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| chunk["candidates"][0]["content"]["parts"][0]["text"].as_str().map(str::to_owned))
        .collect()
}

/// `gw.channel.consecutive_failures` of channel `id` on the data plane's
/// `/metrics`.
async fn consecutive_failures(gw: &Gateway, id: &str) -> Option<u64> {
    let admin = gw.cluster.data_planes[0].admin_addr.expect("the data plane's admin listener");
    let text = gw.cluster.http().get(format!("http://{admin}/metrics")).send().await.ok()?.text().await.ok()?;
    let label = format!("gw_channel=\"{id}\"");
    text.lines()
        .find(|line| line.starts_with("gw_channel_consecutive_failures") && line.contains(&label))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn a_silent_upstream_gets_keepalives_in_each_dialect_then_its_answer_billed_once() {
    let gw = gateway().await;
    let upstream = Thinking::start("a", THINKING).await.expect("thinking upstream");
    gw.channel("openai", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;

    let reply = gw.chat(0, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (beats, rest) = after_beats(&reply.text, KEEPALIVE);
    assert!(beats >= 1, "no keepalive while the upstream thought: {}", reply.text);
    assert!(rest.starts_with("data: {"), "the answer's events follow the keepalives: {rest}");
    assert!(!rest.contains(": keepalive"), "no keepalive once the answer began: {rest}");
    assert_eq!(streamed_text(rest), upstream.reply());
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");

    let records = gw.wait_for_usage(1).await;
    let (prompt, completion) = USAGE;
    assert_eq!(
        (records[0]["prompt_tokens"].as_i64(), records[0]["completion_tokens"].as_i64()),
        (Some(prompt.into()), Some(completion.into()))
    );
    assert_eq!(records[0]["status"], 200);

    // The responses dialect, passed through: comments before its typed events.
    let body = json!({"model": MODEL, "input": "hi", "stream": true});
    let reply = gw.post(0, "/v1/responses", Some(&gw.key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (beats, rest) = after_beats(&reply.text, KEEPALIVE);
    assert!(beats >= 1, "{}", reply.text);
    assert!(rest.starts_with("event: response.created\n"), "the held opening events come first: {rest}");
    assert_eq!(typed_text(rest), upstream.reply());
    assert!(rest.contains("event: response.completed\n"), "{rest}");

    // Gemini's SSE stream, translated from the chat channel.
    let url = format!("http://{}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", gw.cluster.data_planes[0].addr);
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let response = gw.cluster.http().post(url).header("x-goog-api-key", &gw.key).json(&body).send().await;
    let response = response.expect("request to the data plane");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("body");
    let (beats, rest) = after_beats(&text, KEEPALIVE);
    assert!(beats >= 1 && rest.starts_with("data: {"), "{text}");
    assert_eq!(gemini_text(rest), upstream.reply());
    let records = gw.wait_for_usage(3).await;
    assert!(records.iter().all(|r| r["completion_tokens"].as_i64() == Some(completion.into())), "{records:?}");

    // The messages dialect, through a messages-native channel: `ping` events.
    let messages_upstream = Thinking::start("m", THINKING).await.expect("thinking upstream");
    gw.channel("anthropic", &messages_upstream.base_url(), 10, &["--type", "anthropic"]).await;
    gw.synced().await;
    let reply = messages(&gw, &messages_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (beats, rest) = after_beats(&reply.text, PING);
    assert!(beats >= 1, "no ping while the upstream thought: {}", reply.text);
    assert!(rest.starts_with("event: message_start\n"), "{rest}");
    assert_eq!(messages_text(rest), messages_upstream.reply());
    let records = gw.wait_for_usage(4).await;
    assert_eq!(records[0]["prompt_tokens"].as_i64(), Some(prompt.into()));
    assert_eq!(records[0]["completion_tokens"].as_i64(), Some(completion.into()));
    assert_eq!(gw.usage().await.len(), 4, "each stream billed once");
}

#[tokio::test]
async fn a_channel_silent_past_its_first_byte_timeout_is_failed_over_behind_keepalives() {
    let gw = gateway().await;
    let silent = Thinking::start("silent", FOREVER).await.expect("thinking upstream");
    let answering = Thinking::start("answering", THINKING).await.expect("thinking upstream");
    let silent_id = gw.channel("silent", &silent.base_url(), 10, &["--first-byte-timeout-ms", "500"]).await;
    let answering_id = gw.channel("answering", &answering.base_url(), 0, &[]).await;
    gw.synced().await;

    let reply = gw.chat(0, true).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!((silent.requests(), answering.requests()), (1, 1), "the silent channel first, then the next");
    let (beats, rest) = after_beats(&reply.text, KEEPALIVE);
    assert!(beats >= 1, "{}", reply.text);
    assert!(
        !reply.text.contains("chatcmpl-silent"),
        "the silent channel's opening chunk reached the client: {}",
        reply.text
    );
    let events: Vec<&str> = rest.split("\n\n").filter(|e| e.starts_with("data: {")).collect();
    assert!(rest.starts_with("data: {") && !events.is_empty(), "{rest}");
    assert!(events.iter().all(|e| e.contains("\"chatcmpl-answering\"")), "only the next channel's events: {rest}");
    assert_eq!(streamed_text(rest), answering.reply());

    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["channel_id"], answering_id.as_str(), "billed once, to the channel that answered");
    let failures = harness::eventually("the silent channel's failure on /metrics", Duration::from_secs(10), || {
        consecutive_failures(&gw, &silent_id)
    })
    .await;
    assert_eq!(failures, 1, "the silent channel's health heard of it");
}

#[tokio::test]
async fn every_channel_silent_ends_the_stream_with_an_error_event_in_the_clients_dialect() {
    let gw = gateway().await;
    let a = Thinking::start("a", FOREVER).await.expect("thinking upstream");
    let b = Thinking::start("b", FOREVER).await.expect("thinking upstream");
    gw.channel("a", &a.base_url(), 10, &["--first-byte-timeout-ms", "300"]).await;
    gw.channel("b", &b.base_url(), 0, &["--first-byte-timeout-ms", "300"]).await;
    let anthropic = ["--type", "anthropic", "--first-byte-timeout-ms", "300"];
    gw.channel("c", &a.base_url(), -10, &anthropic).await;
    gw.synced().await;

    let reply = gw.chat(0, true).await;
    assert_eq!(reply.status, 200, "committed by the keepalives: {}", reply.text);
    let (beats, rest) = after_beats(&reply.text, KEEPALIVE);
    assert!(beats >= 1, "{}", reply.text);
    let data = rest.strip_prefix("data: ").and_then(|r| r.strip_suffix("\n\n")).unwrap_or_else(|| panic!("{rest}"));
    let event: Value = serde_json::from_str(data).expect("an error event");
    let message = event["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("upstream timed out") || message.contains("timed out"), "{event}");
    assert!(message.contains(reply.request_id()), "{event}");
    assert!(!reply.text.contains("chatcmpl-"), "no upstream event reached the client: {}", reply.text);

    // The messages dialect: its own error event after the pings.
    let reply = messages(&gw, &messages_body(true)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (beats, rest) = after_beats(&reply.text, PING);
    assert!(beats >= 1, "{}", reply.text);
    let data = rest.strip_prefix("event: error\ndata: ").and_then(|r| r.strip_suffix("\n\n"));
    let event: Value = serde_json::from_str(data.unwrap_or_else(|| panic!("{rest}"))).expect("an error event");
    assert_eq!(event["type"], "error", "{event}");
    assert!(event["error"]["type"].is_string() && event["error"]["message"].is_string(), "{event}");

    // The responses dialect: a typed `error` event.
    let body = json!({"model": MODEL, "input": "hi", "stream": true});
    let reply = gw.post(0, "/v1/responses", Some(&gw.key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let (beats, rest) = after_beats(&reply.text, KEEPALIVE);
    assert!(beats >= 1, "{}", reply.text);
    let data = rest.strip_prefix("event: error\ndata: ").and_then(|r| r.strip_suffix("\n\n"));
    let event: Value = serde_json::from_str(data.unwrap_or_else(|| panic!("{rest}"))).expect("an error event");
    assert_eq!(event["type"], "error", "{event}");
    assert_eq!(event["message"], event["error"]["message"], "{event}");
    assert!(event["message"].as_str().is_some_and(|m| m.contains("upstream timed out")), "{event}");

    // Nothing was billed: the next answer is the only record.
    let answering = MockUpstream::start().await.expect("mock upstream");
    gw.channel("answering", &answering.base_url(), 20, &[]).await;
    gw.synced().await;
    assert_eq!(gw.chat(0, false).await.status, 200);
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["status"], 200);
}

#[tokio::test]
async fn an_error_before_the_first_interval_keeps_its_own_status() {
    // An interval no answer of a local upstream takes.
    let gw = Gateway::start_with(1, |_, dp| dp.stream_keepalive = Some(Duration::from_secs(5))).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("a", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;
    upstream.fail_next(400, 1);
    let reply = gw.chat(0, true).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(reply.json()["error"]["message"].is_string(), "{}", reply.text);
    // A fast answer streams without a keepalive.
    let reply = gw.post(0, "/v1/chat/completions", Some(&gw.key), &chat_body(true)).await;
    assert_eq!(reply.status, 200);
    assert!(reply.text.starts_with("data: "), "{}", reply.text);
}

#[tokio::test]
async fn the_official_sdks_read_through_keepalives_and_their_error_events() {
    let gw = gateway().await;
    let chat = Thinking::start("chat", THINKING).await.expect("thinking upstream");
    let chat_id = gw.channel("openai", &chat.base_url(), 0, &[]).await;
    let anthropic = Thinking::start("anthropic", THINKING).await.expect("thinking upstream");
    let anthropic_id = gw.channel("anthropic", &anthropic.base_url(), 10, &["--type", "anthropic"]).await;
    gw.synced().await;
    let host = format!("http://{}", gw.cluster.data_planes[0].addr);
    let env = [("GW_HOST", host.as_str()), ("GW_API_KEY", gw.key.as_str()), ("GW_MODEL", MODEL)];
    let (prompt, completion) = USAGE;

    // The anthropic channel has the higher priority: the messages client first.
    let said = harness::sdk("keepalive.py", &["anthropic"], &env).await;
    assert_eq!(said["text"], anthropic.reply(), "{said}");
    assert_eq!(said["usage"], json!({"input_tokens": prompt, "output_tokens": completion}), "{said}");
    let update = |id: &str, priority: Option<i32>, first_byte_timeout_ms: Option<u32>| {
        let request =
            pb::UpdateChannelRequest { id: id.to_owned(), priority, first_byte_timeout_ms, ..Default::default() };
        let mut admin = gw.admin();
        async move { admin.update_channel(request).await.expect("channel update") }
    };
    update(&chat_id, Some(20), None).await;
    gw.synced().await;
    let said = harness::sdk("keepalive.py", &["openai"], &env).await;
    assert_eq!(said["text"], chat.reply(), "{said}");
    assert_eq!(said["usage"], json!({"prompt_tokens": prompt, "completion_tokens": completion}), "{said}");
    let said = harness::sdk("keepalive.py", &["openai-responses"], &env).await;
    assert_eq!(said["text"], chat.reply(), "{said}");
    assert_eq!(said["usage"], json!({"input_tokens": prompt, "output_tokens": completion}), "{said}");
    assert_eq!(gw.wait_for_usage(3).await.len(), 3);

    // Every channel silent past its first-byte timeout: each SDK raises.
    chat.set_silence(FOREVER);
    anthropic.set_silence(FOREVER);
    update(&chat_id, None, Some(300)).await;
    update(&anthropic_id, None, Some(300)).await;
    gw.synced().await;
    let said = harness::sdk("keepalive.py", &["openai-error"], &env).await;
    assert_eq!(said["error"]["class"], "APIError", "{said}");
    assert!(said["error"]["message"].as_str().is_some_and(|m| m.contains("upstream timed out")), "{said}");
    assert_eq!(said["text"], "", "{said}");
    let said = harness::sdk("keepalive.py", &["anthropic-error"], &env).await;
    assert_eq!(said["error"]["type"], "timeout_error", "{said}");
    assert!(said["error"]["message"].as_str().is_some_and(|m| m.contains("upstream timed out")), "{said}");
    assert_eq!(gw.usage().await.len(), 3, "the failed streams billed nothing");
}
