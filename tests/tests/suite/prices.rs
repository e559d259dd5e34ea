//! Prices as providers bill: cache writes kept five minutes or an hour,
//! reasoning tokens priced apart and a long-context tier, each read from
//! the upstream's usage (messages and OpenAI dialects, plain and streamed,
//! translated or not) into a usage record that keeps the counts it was
//! billed on and its exact cost in micro-USD.

use crate::support;

use gw_proto::pb;
use gw_tests::mock::upstream::{MockUpstream, Script};
use serde_json::{Value, json};
use support::{Gateway, MODEL};

/// Prices of `gpt-4o` in these tests: $3 in, $15 out, $0.30 cache reads,
/// $3.75 and $6 cache writes, $20 reasoning; past 200k prompt tokens $6 in
/// and $22.50 out.
fn long_context_prices() -> pb::UpdateModelRequest {
    pb::UpdateModelRequest {
        id: MODEL.into(),
        input_price_micros: Some(3_000_000),
        output_price_micros: Some(15_000_000),
        cached_price_micros: Some(300_000),
        cache_write_5m_price_micros: Some(3_750_000),
        cache_write_1h_price_micros: Some(6_000_000),
        reasoning_price_micros: Some(20_000_000),
        tier_threshold_tokens: Some(200_000),
        tier_input_price_micros: Some(6_000_000),
        tier_output_price_micros: Some(22_500_000),
        ..Default::default()
    }
}

/// A gateway whose one channel, of `kind`, is `upstream`, with the model
/// at [`long_context_prices`].
async fn gateway(upstream: &MockUpstream, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.admin().update_model(long_context_prices()).await.expect("model update");
    gw.channel("main", &upstream.base_url(), 0, &["--type", kind]).await;
    gw.synced().await;
    gw
}

/// A messages request, plain or streamed.
fn messages_body(stream: bool) -> Value {
    json!({ "model": MODEL, "max_tokens": 64, "stream": stream, "messages": [{ "role": "user", "content": "hi" }] })
}

/// Sends `body` to `path` as that path's clients do, checks it was
/// answered and returns the answer's text.
async fn send(gw: &Gateway, path: &str, body: &Value) -> String {
    let url = format!("http://{}{path}", gw.cluster.data_planes[0].addr);
    let mut request = gw.cluster.http().post(url).json(body);
    request = if path == "/v1/messages" {
        request.header("x-api-key", &gw.key).header("anthropic-version", "2023-06-01")
    } else {
        request.bearer_auth(&gw.key)
    };
    let response = request.send().await.expect("request to the data plane");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{path}: {text}");
    text
}

/// The counts a record was billed on: prompt, cached, 5-minute writes,
/// 1-hour writes, completion, reasoning, tier, cost.
fn billed_on(record: &Value) -> [i64; 8] {
    let int = |field: &str| record[field].as_i64().unwrap_or(0);
    [
        int("prompt_tokens"),
        int("cached_tokens"),
        int("cache_write_5m_tokens"),
        int("cache_write_1h_tokens"),
        int("completion_tokens"),
        int("reasoning_tokens"),
        int("tier"),
        int("cost_micros"),
    ]
}

/// Waits for `n` records and checks each was billed on `want` and not
/// estimated.
async fn assert_records(gw: &Gateway, n: usize, want: [i64; 8]) {
    for record in gw.wait_for_usage(n).await {
        assert_eq!(billed_on(&record), want, "{record}");
        assert_eq!(record["estimated"].as_bool(), Some(false), "{record}");
    }
}

#[tokio::test]
async fn messages_cache_writes_are_billed_at_their_prices_plain_streamed_and_translated() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script {
        prompt_tokens: 10_000,
        cached_tokens: 1_000,
        cache_write_5m_tokens: 2_000,
        cache_write_1h_tokens: 3_000,
        completion_tokens: 500,
        ..Script::default()
    });
    let gw = gateway(&upstream, "anthropic").await;
    send(&gw, "/v1/messages", &messages_body(false)).await;
    send(&gw, "/v1/messages", &messages_body(true)).await;
    // An OpenAI client on the messages channel: translated, same counts.
    let chat: Value = serde_json::from_str(&send(&gw, "/v1/chat/completions", &support::chat_body(false)).await)
        .expect("a JSON answer");
    assert_eq!(chat["usage"]["prompt_tokens_details"]["cache_write_tokens"], 5_000, "{chat}");
    send(&gw, "/v1/chat/completions", &support::chat_body(true)).await;
    // 4k fresh × $3 + 1k read × $0.30 + 2k × $3.75 + 3k × $6 + 500 × $15
    // = 12 000 + 300 + 7 500 + 18 000 + 7 500 µ$.
    assert_records(&gw, 4, [10_000, 1_000, 2_000, 3_000, 500, 0, 0, 45_300]).await;
}

#[tokio::test]
async fn openai_reasoning_tokens_are_billed_apart_plain_streamed_and_translated() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script {
        prompt_tokens: 1_000,
        cached_tokens: 400,
        completion_tokens: 600,
        reasoning_tokens: 400,
        ..Script::default()
    });
    let gw = gateway(&upstream, "openai").await;
    send(&gw, "/v1/chat/completions", &support::chat_body(false)).await;
    send(&gw, "/v1/chat/completions", &support::chat_body(true)).await;
    // A messages client on the OpenAI channel: translated, same counts.
    let message: Value =
        serde_json::from_str(&send(&gw, "/v1/messages", &messages_body(false)).await).expect("a JSON answer");
    assert_eq!(message["usage"]["input_tokens"], 600, "cache reads are not input tokens: {message}");
    assert_eq!(message["usage"]["output_tokens"], 600, "reasoning is part of the output: {message}");
    send(&gw, "/v1/messages", &messages_body(true)).await;
    // 600 fresh × $3 + 400 read × $0.30 + 200 output × $15 + 400 reasoning
    // × $20 = 1 800 + 120 + 3 000 + 8 000 µ$.
    assert_records(&gw, 4, [1_000, 400, 0, 0, 600, 400, 0, 12_920]).await;
}

#[tokio::test]
async fn a_prompt_past_the_tier_threshold_bills_the_whole_request_at_the_tier() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    upstream.set_script(Script { prompt_tokens: 200_000, completion_tokens: 1_000, ..Script::default() });
    send(&gw, "/v1/chat/completions", &support::chat_body(false)).await;
    // At the threshold: 200k × $3 + 1k × $15 = 600 000 + 15 000 µ$.
    assert_records(&gw, 1, [200_000, 0, 0, 0, 1_000, 0, 0, 615_000]).await;

    upstream.set_script(Script { prompt_tokens: 200_001, completion_tokens: 1_000, ..Script::default() });
    send(&gw, "/v1/chat/completions", &support::chat_body(false)).await;
    send(&gw, "/v1/chat/completions", &support::chat_body(true)).await;
    // One past it, every token at the tier: 200 001 × $6 + 1k × $22.50
    // = 1 200 006 + 22 500 µ$.
    let records = gw.wait_for_usage(3).await;
    for record in &records[..2] {
        assert_eq!(billed_on(record), [200_001, 0, 0, 0, 1_000, 0, 1, 1_222_506], "{record}");
    }
    let spent = 615_000 + 2 * 1_222_506;
    gw_tests::harness::eventually(
        "the balance to drop by the cost billed",
        std::time::Duration::from_secs(15),
        || async { (gw.balance().await == 100_000_000 - spent).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn billing_prices_are_validated_and_partial_updates_keep_the_others() {
    let gw = Gateway::start_embedded(0).await;
    let mut admin = gw.admin();
    let bad = |request: pb::UpdateModelRequest| pb::UpdateModelRequest { id: MODEL.into(), ..request };
    let refused = admin
        .update_model(bad(pb::UpdateModelRequest { tier_threshold_tokens: Some(-1), ..Default::default() }))
        .await
        .expect_err("a negative threshold is refused");
    assert_eq!(refused.message(), "tier threshold must not be negative");
    let refused = admin
        .update_model(bad(pb::UpdateModelRequest { cache_write_1h_price_micros: Some(-5), ..Default::default() }))
        .await
        .expect_err("a negative price is refused");
    assert_eq!(refused.message(), "prices must not be negative");

    admin.update_model(long_context_prices()).await.expect("model update");
    let only_reasoning = pb::UpdateModelRequest { reasoning_price_micros: Some(0), ..bad(Default::default()) };
    let model = admin.update_model(only_reasoning).await.expect("model update").into_inner();
    assert_eq!(model.reasoning_price_micros, 0, "back to the output price");
    let kept = (
        model.tier_threshold_tokens,
        model.tier_input_price_micros,
        model.tier_output_price_micros,
        model.cache_write_5m_price_micros,
        model.cache_write_1h_price_micros,
    );
    assert_eq!(kept, (200_000, 6_000_000, 22_500_000, 3_750_000, 6_000_000));
    let stored = admin.get_model(pb::GetRequest { id: MODEL.into() }).await.expect("model get").into_inner();
    assert_eq!(stored, model, "what the update answered is what is stored");
}
