//! The OpenAI responses dialect on a channel that does not speak it: the
//! official OpenAI Python SDK (`tests/sdk/openai_responses.py`) calls
//! `/v1/responses` plain, streamed and with a function tool, and the gateway
//! translates each call to the messages API of an `anthropic` channel on the
//! mock upstream and the answer back, billed exactly as a messages call.
//! `previous_response_id` there is a clear 400; input-token counts are
//! counted locally for that channel, passed to an `openai` channel's own
//! endpoint, and free on both. The other OpenAI endpoints reach an `azure`
//! channel at its deployment's URL with `api-version`.

use crate::support;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Json, Router, routing::post};
use gw_proto::pb;
use gw_tests::{
    harness::{self, eventually},
    mock::{
        azure::{self, MockAzure, Setup},
        messages::ToolUse,
        upstream::{MockUpstream, Recorded},
    },
};
use serde_json::{Value, json};
use support::{Gateway, MODEL};

/// gpt-4o at $2.5 / $10 per 1M tokens, ratio 1, the mock's 11 prompt + 7
/// completion tokens: ceil(11 × 2.5 + 7 × 10) = 98 µ$ per request.
const COST: i64 = 98;
const START_BALANCE: i64 = 100_000_000;
const REPLY: &str = "Hello from the mock upstream";
/// Billed calls the SDK script makes: plain, streamed, tool call plain and
/// streamed, tool result (the input-token count is free).
const SDK_CALLS: usize = 5;
/// What the OpenAI-shaped counter below answers.
const UPSTREAM_COUNT: i64 = 4242;

/// A gateway whose one channel, of `kind`, is at `base_url`; `gpt-4o` maps
/// to `upstream-model` on it.
async fn gateway(base_url: &str, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.channel("main", base_url, 0, &["--type", kind, "--map", "gpt-4o=upstream-model"]).await;
    gw.synced().await;
    gw
}

async fn run_sdk(gw: &Gateway) -> Value {
    let base_url = format!("http://{}/v1", gw.cluster.data_planes[0].addr);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", gw.key.as_str()), ("GW_MODEL", MODEL)];
    harness::sdk("openai_responses.py", &[], &env).await
}

fn usage() -> Value {
    json!({ "input_tokens": 11, "cached_tokens": 0, "output_tokens": 7, "reasoning_tokens": 0, "total_tokens": 18 })
}

fn messages_requests(upstream: &MockUpstream) -> Vec<Recorded> {
    upstream.requests().into_iter().filter(|r| r.path == "/v1/messages").collect()
}

#[tokio::test]
async fn the_openai_sdk_speaks_responses_to_an_anthropic_channel_and_is_billed_exactly() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let script = gw_tests::mock::upstream::Script {
        tool_use: Some(ToolUse { name: None, input: json!({ "location": "Paris" }) }),
        ..Default::default()
    };
    upstream.set_script(script);
    let gw = gateway(&upstream.base_url(), "anthropic").await;
    let result = run_sdk(&gw).await;

    let plain = &result["plain"];
    assert_eq!(plain["object"], "response", "{result}");
    assert_eq!(plain["status"], "completed", "{result}");
    assert_eq!(plain["text"], REPLY, "{result}");
    assert_eq!(plain["model"], MODEL, "the client's model name: {result}");
    assert_eq!(plain["usage"], usage(), "{result}");

    let streamed = &result["streamed"];
    assert_eq!(streamed["text"], REPLY, "{result}");
    assert_eq!(streamed["output_text"], REPLY, "{result}");
    assert_eq!(streamed["usage"], usage(), "{result}");
    let events = streamed["events"].as_array().expect("events");
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], n, "numbered from 0 without gaps: {events:?}");
    }
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let deltas = kinds.iter().filter(|k| **k == "response.output_text.delta").count();
    assert!(deltas > 1, "the text streams piece by piece: {kinds:?}");
    let mut expected =
        vec!["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);

    let calls = &result["tool_call"]["calls"];
    assert_eq!(calls.as_array().map(Vec::len), Some(1), "{result}");
    assert_eq!((&calls[0]["name"], &calls[0]["arguments"]), (&json!("get_weather"), &json!({ "location": "Paris" })));
    let call_id = calls[0]["call_id"].as_str().unwrap_or_default();
    assert!(call_id.starts_with("toolu_mock"), "the upstream's call id: {result}");
    assert_eq!(result["tool_call"]["text"], REPLY, "the text before the call: {result}");
    let streamed_call = &result["streamed_tool_call"];
    assert_eq!(streamed_call["calls"][0]["arguments"], json!({ "location": "Paris" }), "{result}");
    assert_eq!(streamed_call["calls"][0]["name"], "get_weather", "{result}");
    assert!(streamed_call["argument_deltas"].as_i64() > Some(0), "{result}");
    assert_eq!(result["after_tool"]["text"], REPLY, "{result}");

    // Every billed call went to the messages API, translated.
    let sent = messages_requests(&upstream);
    assert_eq!(sent.len(), SDK_CALLS, "{sent:#?}");
    for request in &sent {
        assert_eq!(request.body["model"], "upstream-model", "{:?}", request.body);
        assert!(request.header("anthropic-version").is_some(), "{:?}", request.headers);
        assert!(request.body["max_tokens"].is_u64(), "messages requires max_tokens: {:?}", request.body);
    }
    assert!(
        sent[0].body["system"].to_string().contains("Be brief."),
        "instructions are the system prompt: {:?}",
        sent[0].body
    );
    assert_eq!(sent[0].body["max_tokens"], 64, "max_output_tokens: {:?}", sent[0].body);
    assert_eq!(sent[1].body["stream"], true, "{:?}", sent[1].body);
    assert_eq!(sent[2].body["tools"][0]["name"], "get_weather", "{:?}", sent[2].body);
    let turns = sent[4].body["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = turns.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{turns:?}");
    let result_block = &turns[2]["content"][0];
    assert_eq!(result_block["type"], "tool_result", "{turns:?}");
    assert_eq!(result_block["tool_use_id"], call_id, "{turns:?}");

    // The count was answered here: the mock saw no count request.
    assert_eq!(result["input_tokens"]["object"], "response.input_tokens", "{result}");
    assert!(result["input_tokens"]["input_tokens"].as_i64() > Some(5), "{result}");
    assert!(upstream.requests().iter().all(|r| r.path == "/v1/messages"), "{:?}", upstream.requests());

    let records = gw.wait_for_usage(SDK_CALLS).await;
    for record in &records {
        assert_eq!(record["endpoint"], "/v1/responses", "{record}");
        assert_eq!(record["model"], MODEL, "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        assert_eq!((record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()), (Some(11), Some(7)));
        assert_eq!(record["cost_micros"].as_i64(), Some(COST), "{record}");
    }
    let want = START_BALANCE - COST * SDK_CALLS as i64;
    eventually("the balance to drop by the usage billed", Duration::from_secs(15), || async {
        (gw.balance().await == want).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(gw.usage().await.len(), SDK_CALLS, "counting input tokens records nothing");
}

#[tokio::test]
async fn previous_response_id_on_an_anthropic_channel_is_a_400_that_says_why() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream.base_url(), "anthropic").await;
    let body = json!({ "model": MODEL, "input": "and then?", "previous_response_id": "resp_123" });
    let reply = gw.post(0, "/v1/responses", Some(&gw.key), &body).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("previous_response_id") && message.contains("whole conversation"), "{message}");
    assert!(messages_requests(&upstream).is_empty(), "nothing was sent upstream");
    assert_eq!(gw.balance().await, START_BALANCE, "nothing is billed");
}

/// An OpenAI-shaped upstream that only counts input tokens, recording the
/// bodies and authorization it got.
async fn openai_counter() -> (SocketAddr, Arc<Mutex<Vec<(Value, String)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = Router::new().route(
        "/v1/responses/input_tokens",
        post(move |headers: axum::http::HeaderMap, Json(body): Json<Value>| {
            let record = record.clone();
            async move {
                let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                record.lock().unwrap_or_else(|p| p.into_inner()).push((body, auth));
                Json(json!({ "object": "response.input_tokens", "input_tokens": UPSTREAM_COUNT }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

#[tokio::test]
async fn input_tokens_go_to_an_openai_channel_which_counts_them_for_free() {
    let (addr, seen) = openai_counter().await;
    let gw = gateway(&format!("http://{addr}/v1"), "openai").await;
    let body = json!({ "model": MODEL, "input": "What is the weather in Paris?" });
    let reply = gw.post(0, "/v1/responses/input_tokens", Some(&gw.key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json(), json!({ "object": "response.input_tokens", "input_tokens": UPSTREAM_COUNT }));
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0["model"], "upstream-model", "the mapped model: {:?}", seen[0].0);
    assert_eq!(seen[0].0["input"], "What is the weather in Paris?");
    assert_eq!(seen[0].1, format!("Bearer {}", support::UPSTREAM_KEY), "the channel's key, not the client's");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(gw.usage().await.is_empty(), "counting records no usage");
    assert_eq!(gw.balance().await, START_BALANCE);
}

#[tokio::test]
async fn input_tokens_are_counted_locally_for_an_anthropic_channel() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream.base_url(), "anthropic").await;
    let short = json!({ "model": MODEL, "input": "hi" });
    let long = json!({ "model": MODEL, "instructions": "Be brief.", "input": [
        { "role": "user", "content": [{ "type": "input_text", "text": "What is the weather in Paris today, and tomorrow?" }] },
    ] });
    let count = |reply: support::Reply| {
        assert_eq!(reply.status, 200, "{}", reply.text);
        let answer = reply.json();
        assert_eq!(answer["object"], "response.input_tokens", "{answer}");
        answer["input_tokens"].as_i64().expect("a count")
    };
    let short = count(gw.post(0, "/v1/responses/input_tokens", Some(&gw.key), &short).await);
    let long = count(gw.post(0, "/v1/responses/input_tokens", Some(&gw.key), &long).await);
    assert!(short > 0 && long > short + 5, "{short} {long}");
    assert!(upstream.requests().is_empty(), "nothing was sent upstream");
    let unauthorized = gw.post(0, "/v1/responses/input_tokens", None, &json!({ "model": MODEL, "input": "hi" })).await;
    assert_eq!(unauthorized.status, 401, "{}", unauthorized.text);
}

#[tokio::test]
async fn embeddings_reach_an_azure_deployment_url_with_its_api_version() {
    const EMBEDDING: &str = "text-embedding-3-small";
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let setup = Setup { deployments: vec![("emb-prod".into(), EMBEDDING.into())], ..Setup::default() };
    let key = setup.key.clone();
    MockAzure::of(&upstream).set_up(setup);
    let gw = Gateway::start(1).await;
    let model = pb::Model {
        id: EMBEDDING.into(),
        category: "embedding".into(),
        input_price_micros: 20_000,
        ..Default::default()
    };
    gw.admin().create_model(model).await.expect("model create");
    let settings = [("api_version", "2024-10-21"), ("deployment", "emb-prod"), ("auth", "api-key")];
    let channel = pb::Channel {
        name: "azure-east".into(),
        r#type: "azure".into(),
        base_url: format!("http://{}", upstream.addr()),
        api_key: key.clone(),
        has_key: true,
        models: vec![EMBEDDING.into()],
        groups: vec!["default".into()],
        weight: 1,
        settings: settings.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("azure channel create");
    gw.synced().await;
    let reply = gw.post(0, "/v1/embeddings", Some(&gw.key), &json!({ "model": EMBEDDING, "input": "hello" })).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["data"][0]["object"], "embedding", "{}", reply.text);
    let seen = MockAzure::of(&upstream).received();
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0].path, "/openai/deployments/emb-prod/embeddings", "{seen:#?}");
    assert_eq!(seen[0].query_param("api-version"), Some("2024-10-21"), "{seen:#?}");
    assert_eq!(seen[0].api_key.as_deref(), Some(key.as_str()), "{seen:#?}");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["prompt_tokens"].as_i64(), Some(azure::EMBEDDING_TOKENS_PER_INPUT), "{}", records[0]);
}
