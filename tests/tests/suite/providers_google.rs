//! `gemini` and `vertex` channels end to end: chat-completions and messages
//! clients reach a Gemini API channel, a Vertex channel's Gemini models
//! and its Anthropic models (through `rawPredict`), streamed and not, with
//! tools; every answer is billed exactly from the provider's own usage
//! (cache reads, cache writes and thoughts included). Vertex calls carry
//! an access token the mock's token endpoint granted for a signed
//! service-account assertion: one exchange serves many requests, a new one
//! is made before the token expires, each key of a pool has its own, and
//! a channel whose key the endpoint refuses fails over to the next channel;
//! Gemini clients' token counts reach Vertex's `countTokens`. Real Redis, the control plane and
//! a data plane in-process, the mock upstream's Google side.

use crate::support;

use std::{collections::HashMap, time::Duration};

use gw_proto::pb;
use gw_tests::{
    harness::eventually,
    mock::{
        google::auth::{GEMINI_KEY, SCOPE},
        messages::ToolUse,
        upstream::{MockUpstream, Recorded, Script},
    },
};
use serde_json::{Value, json};
use support::{Gateway, Reply};

const GEMINI: &str = "gemini-2.5-flash";
const CLAUDE: &str = "claude-sonnet-4-5";
/// The Anthropic model as Vertex names it.
const CLAUDE_ON_VERTEX: &str = "claude-sonnet-4-5@20250929";
const PROJECT: &str = "mock-project";
const LOCATION: &str = "us-east5";
const REPLY: &str = "The heron counted forty two pebbles";
/// The scripted usage: the whole prompt, its cached part, its part
/// written to the cache (the messages API reports it), the completion and
/// its part spent thinking (Gemini reports it apart).
const PROMPT: i64 = 1000;
const CACHED: i64 = 400;
const WRITTEN: i64 = 100;
const COMPLETION: i64 = 200;
const THOUGHTS: i64 = 50;
/// A Gemini answer at $0.30 per 1M prompt tokens, $0.075 cached and $2.50
/// out (thoughts too): 600 × 0.3 + 400 × 0.075 + 200 × 2.5.
const GEMINI_COST: i64 = 180 + 30 + 500;
/// A Claude answer at $3 per 1M prompt tokens, $0.30 cached, $3.75 written
/// and $15 out: 500 × 3 + 400 × 0.3 + 100 × 3.75 + 200 × 15.
const CLAUDE_COST: i64 = 1500 + 120 + 375 + 3000;

/// The client dialects the tests speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Chat,
    Messages,
}

/// What a fixture's channels are.
#[derive(Clone, Copy)]
enum Upstream {
    /// One `gemini` channel.
    Gemini,
    /// One `vertex` channel with a service account the endpoint knows.
    Vertex,
}

struct Fixture {
    gw: Gateway,
    upstream: MockUpstream,
    /// The channel's id.
    channel: String,
}

// === set-up ===

fn script(tool_use: Option<ToolUse>) -> Script {
    Script {
        reply: REPLY.into(),
        prompt_tokens: PROMPT as u32,
        cached_tokens: CACHED as u32,
        cache_write_5m_tokens: WRITTEN as u32,
        completion_tokens: COMPLETION as u32,
        reasoning_tokens: THOUGHTS as u32,
        tool_use,
        ..Script::default()
    }
}

async fn models(gw: &Gateway) {
    let gemini = pb::Model {
        id: GEMINI.into(),
        category: "chat".into(),
        input_price_micros: 300_000,
        cached_price_micros: 75_000,
        output_price_micros: 2_500_000,
        ..Default::default()
    };
    let claude = pb::Model {
        id: CLAUDE.into(),
        category: "chat".into(),
        input_price_micros: 3_000_000,
        cached_price_micros: 300_000,
        cache_write_5m_price_micros: 3_750_000,
        output_price_micros: 15_000_000,
        ..Default::default()
    };
    for model in [gemini, claude] {
        gw.admin().create_model(model).await.expect("model create");
    }
}

/// A channel of `kind` named `name` serving both models at `priority`.
fn channel(name: &str, kind: &str, base_url: String, key: String, priority: i32) -> pb::Channel {
    pb::Channel {
        name: name.into(),
        r#type: kind.into(),
        base_url,
        api_key: key,
        has_key: true,
        models: vec![GEMINI.into(), CLAUDE.into()],
        groups: vec!["default".into(), "vip".into()],
        priority,
        weight: 1,
        ..Default::default()
    }
}

/// A `vertex` channel on `upstream` holding `key` (a service-account
/// JSON), Claude mapped to its Vertex name.
fn vertex_channel(upstream: &MockUpstream, name: &str, key: String, priority: i32) -> pb::Channel {
    let google = upstream.google();
    let mut channel = channel(name, "vertex", google.vertex_base_url(PROJECT, LOCATION), key, priority);
    let settings =
        [("project", PROJECT.to_owned()), ("location", LOCATION.to_owned()), ("token_url", google.token_url())];
    channel.settings = settings.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    channel.model_map = HashMap::from([(CLAUDE.to_owned(), CLAUDE_ON_VERTEX.to_owned())]);
    channel
}

async fn fixture(kind: Upstream) -> Fixture {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    models(&gw).await;
    let google = upstream.google();
    let channel = match kind {
        Upstream::Gemini => channel("gemini", "gemini", google.gemini_base_url(), GEMINI_KEY.into(), 0),
        Upstream::Vertex => vertex_channel(&upstream, "vertex", google.service_account("gateway"), 0),
    };
    let channel = gw.admin().create_channel(channel).await.expect("channel create").into_inner().id;
    upstream.set_script(script(None));
    gw.synced().await;
    Fixture { gw, upstream, channel }
}

// === requests ===

fn body(client: Client, model: &str, stream: bool, tools: bool) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": 256,
        "messages": [{ "role": "user", "content": "How many pebbles?" }],
        "stream": stream,
    });
    if tools {
        let schema = json!({ "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] });
        body["tools"] = match client {
            Client::Chat => {
                json!([{ "type": "function", "function": { "name": "get_weather", "description": "Weather", "parameters": schema } }])
            }
            Client::Messages => json!([{ "name": "get_weather", "description": "Weather", "input_schema": schema }]),
        };
    }
    if client == Client::Chat && stream {
        body["stream_options"] = json!({ "include_usage": true });
    }
    body
}

/// Sends `body` in `client`'s dialect with the test token.
async fn send(gw: &Gateway, client: Client, body: &Value) -> Reply {
    let addr = gw.cluster.data_planes[0].addr;
    let request = match client {
        Client::Chat => gw.cluster.http().post(format!("http://{addr}/v1/chat/completions")).bearer_auth(&gw.key),
        Client::Messages => gw
            .cluster
            .http()
            .post(format!("http://{addr}/v1/messages"))
            .header("x-api-key", &gw.key)
            .header("anthropic-version", "2023-06-01"),
    };
    let response = request.json(body).send().await.expect("request to the data plane");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

/// What an answer said: its text, and the tool call it made as `(name,
/// arguments)`.
fn answer(client: Client, stream: bool, reply: &Reply) -> (String, Option<(String, Value)>) {
    assert_eq!(reply.status, 200, "{}", reply.text);
    if !stream {
        let body = reply.json();
        return match client {
            Client::Chat => {
                let message = &body["choices"][0]["message"];
                let call = message["tool_calls"].get(0).map(|c| {
                    let arguments = c["function"]["arguments"].as_str().unwrap_or("null");
                    (
                        c["function"]["name"].as_str().unwrap_or_default().to_owned(),
                        serde_json::from_str(arguments).unwrap_or(Value::Null),
                    )
                });
                (message["content"].as_str().unwrap_or_default().to_owned(), call)
            }
            Client::Messages => {
                let blocks = body["content"].as_array().cloned().unwrap_or_default();
                let text = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
                let call = blocks
                    .iter()
                    .find(|b| b["type"] == "tool_use")
                    .map(|b| (b["name"].as_str().unwrap_or_default().to_owned(), b["input"].clone()));
                (text, call)
            }
        };
    }
    let events: Vec<Value> = reply
        .text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap_or_else(|_| panic!("an event that is not JSON: {data}")))
        .collect();
    let mut text = String::new();
    let (mut name, mut arguments) = (None::<String>, String::new());
    for event in &events {
        match client {
            Client::Chat => {
                let delta = &event["choices"][0]["delta"];
                text.push_str(delta["content"].as_str().unwrap_or_default());
                if let Some(call) = delta["tool_calls"].get(0) {
                    if let Some(n) = call["function"]["name"].as_str() {
                        name = Some(n.to_owned());
                    }
                    arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
                }
            }
            Client::Messages => {
                if event["type"] == "content_block_start" && event["content_block"]["type"] == "tool_use" {
                    name = event["content_block"]["name"].as_str().map(str::to_owned);
                }
                text.push_str(event["delta"]["text"].as_str().unwrap_or_default());
                arguments.push_str(event["delta"]["partial_json"].as_str().unwrap_or_default());
            }
        }
    }
    let call = name.map(|n| (n, serde_json::from_str(&arguments).unwrap_or(Value::Null)));
    (text, call)
}

/// The upstream's requests to paths that end in `suffix`.
fn sent_to(upstream: &MockUpstream, suffix: &str) -> Vec<Recorded> {
    upstream.requests().into_iter().filter(|r| r.path.ends_with(suffix)).collect()
}

/// Waits for `n` usage records and checks each is one scripted answer
/// billed at `cost`, with `written` cache writes and `reasoning` tokens.
async fn assert_billed(gw: &Gateway, n: usize, model: &str, cost: i64, written: i64, reasoning: i64) {
    let records = gw.wait_for_usage(n).await;
    for record in &records {
        assert_eq!(record["model"], model, "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        let keys = ["prompt_tokens", "cached_tokens", "cache_write_5m_tokens", "completion_tokens", "reasoning_tokens"];
        let counts = keys.map(|k| record[k].as_i64().unwrap_or(0));
        assert_eq!(counts, [PROMPT, CACHED, written, COMPLETION, reasoning], "{record}");
        assert_eq!(record["cost_micros"].as_i64(), Some(cost), "{record}");
    }
}

/// Every pairing of client dialect and streaming, plain and with tools,
/// for `model` on `fixture`; the upstream calls they made.
async fn every_pairing(f: &Fixture, model: &str) -> usize {
    let mut answered = 0;
    for client in [Client::Chat, Client::Messages] {
        for stream in [false, true] {
            f.upstream.set_script(script(None));
            let reply = send(&f.gw, client, &body(client, model, stream, false)).await;
            let (text, call) = answer(client, stream, &reply);
            assert_eq!((text.as_str(), call), (REPLY, None), "{client:?} stream {stream}: {}", reply.text);

            let tool = ToolUse { name: None, input: json!({ "city": "Paris" }) };
            f.upstream.set_script(Script { reply: String::new(), ..script(Some(tool)) });
            let reply = send(&f.gw, client, &body(client, model, stream, true)).await;
            let (_, call) = answer(client, stream, &reply);
            let expected = Some(("get_weather".to_owned(), json!({ "city": "Paris" })));
            assert_eq!(call, expected, "{client:?} stream {stream}: {}", reply.text);
            answered += 2;
        }
    }
    answered
}

// === Gemini API ===

#[tokio::test]
async fn chat_and_messages_clients_reach_a_gemini_channel_with_tools_and_are_billed_exactly() {
    let f = fixture(Upstream::Gemini).await;
    let answered = every_pairing(&f, GEMINI).await;

    let whole = sent_to(&f.upstream, "/v1beta/models/gemini-2.5-flash:generateContent");
    let streamed = sent_to(&f.upstream, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    assert_eq!((whole.len(), streamed.len()), (4, 4), "{:#?}", f.upstream.requests());
    for r in whole.iter().chain(&streamed) {
        assert_eq!(r.header("x-goog-api-key"), Some(GEMINI_KEY), "the channel's key");
        assert_eq!(r.header("authorization"), None, "the client's token stays here");
        assert!(r.body.get("model").is_none(), "the model is in the path: {}", r.body);
        assert_eq!(r.body["contents"][0]["role"], "user", "{}", r.body);
    }
    assert!(streamed.iter().all(|r| r.query.as_deref() == Some("alt=sse")));
    let with_tools = whole.iter().find(|r| r.body.get("tools").is_some()).expect("a request with tools");
    assert_eq!(with_tools.body["tools"][0]["functionDeclarations"][0]["name"], "get_weather", "{}", with_tools.body);
    assert_billed(&f.gw, answered, GEMINI, GEMINI_COST, 0, THOUGHTS).await;
}

#[tokio::test]
async fn a_gemini_key_the_api_refuses_is_reported_in_the_clients_shape_without_the_key() {
    let f = fixture(Upstream::Gemini).await;
    f.upstream.google().set_api_key("AIza-another-key");
    let reply = send(&f.gw, Client::Chat, &body(Client::Chat, GEMINI, false, false)).await;
    assert!(reply.status >= 400, "{}", reply.text);
    assert!(reply.json()["error"]["message"].is_string(), "{}", reply.text);
    assert!(!reply.text.contains(GEMINI_KEY), "{}", reply.text);
}

// === Vertex AI ===

#[tokio::test]
async fn clients_reach_claude_on_vertex_through_raw_predict_and_are_billed_with_cache_writes() {
    let f = fixture(Upstream::Vertex).await;
    let answered = every_pairing(&f, CLAUDE).await;

    let base = format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/anthropic/models/{CLAUDE_ON_VERTEX}");
    let whole = sent_to(&f.upstream, &format!("{base}:rawPredict"));
    let streamed = sent_to(&f.upstream, &format!("{base}:streamRawPredict"));
    assert_eq!((whole.len(), streamed.len()), (4, 4), "{:#?}", f.upstream.requests());
    for r in whole.iter().chain(&streamed) {
        assert_eq!(r.body["anthropic_version"], "vertex-2023-10-16", "{}", r.body);
        assert!(r.body.get("model").is_none(), "{}", r.body);
        let bearer = r.header("authorization").unwrap_or_default();
        assert!(bearer.starts_with("Bearer ya29.mock-access-token-"), "{bearer}");
        assert_eq!(r.header("x-api-key"), None);
    }
    assert!(streamed.iter().all(|r| r.body["stream"] == true));
    assert_eq!(f.upstream.google().tokens_granted(), 1, "one token for every call");
    assert_billed(&f.gw, answered, CLAUDE, CLAUDE_COST, WRITTEN, 0).await;
}

#[tokio::test]
async fn clients_reach_gemini_on_vertex_with_the_service_accounts_token_and_are_billed_exactly() {
    let f = fixture(Upstream::Vertex).await;
    let answered = every_pairing(&f, GEMINI).await;

    let base = format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{GEMINI}");
    let whole = sent_to(&f.upstream, &format!("{base}:generateContent"));
    let streamed = sent_to(&f.upstream, &format!("{base}:streamGenerateContent"));
    assert_eq!((whole.len(), streamed.len()), (4, 4), "{:#?}", f.upstream.requests());
    assert!(streamed.iter().all(|r| r.query.as_deref() == Some("alt=sse")));
    assert!(whole.iter().chain(&streamed).all(|r| r.header("x-goog-api-key").is_none()));

    let exchanges = f.upstream.google().exchanges();
    assert_eq!(exchanges.len(), 1, "{exchanges:#?}");
    let claims = &exchanges[0].claims;
    assert_eq!(claims["iss"], "gateway@mock-project.iam.gserviceaccount.com");
    assert_eq!(claims["scope"], SCOPE);
    assert_eq!(claims["aud"], f.upstream.google().token_url().as_str());
    assert_eq!(exchanges[0].header["alg"], "RS256");
    assert!(exchanges[0].header["kid"].is_string(), "the key id names the signing key");
    assert_billed(&f.gw, answered, GEMINI, GEMINI_COST, 0, THOUGHTS).await;
}

#[tokio::test]
async fn concurrent_requests_share_one_token_exchange() {
    let f = fixture(Upstream::Vertex).await;
    f.upstream.google().set_token_delay(Duration::from_millis(300));
    let chat = body(Client::Chat, GEMINI, false, false);
    let requests = (0..8).map(|_| send(&f.gw, Client::Chat, &chat));
    for reply in futures_util::future::join_all(requests).await {
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    for _ in 0..4 {
        let reply = send(&f.gw, Client::Messages, &body(Client::Messages, CLAUDE, false, false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    assert_eq!(f.upstream.google().exchanges().len(), 1, "one exchange for twelve requests");
}

#[tokio::test]
async fn a_token_is_refreshed_before_it_expires_and_no_call_is_refused() {
    let f = fixture(Upstream::Vertex).await;
    // Refreshed with a quarter of its life left: after about 4.5 s.
    f.upstream.google().set_token_lifetime(Duration::from_secs(6));
    let chat = body(Client::Chat, GEMINI, false, false);
    assert_eq!(send(&f.gw, Client::Chat, &chat).await.status, 200);
    assert_eq!(send(&f.gw, Client::Chat, &chat).await.status, 200);
    assert_eq!(f.upstream.google().tokens_granted(), 1, "the first token serves while it is fresh");

    eventually("a second token exchange", Duration::from_secs(15), || async {
        let reply = send(&f.gw, Client::Chat, &chat).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        (f.upstream.google().tokens_granted() == 2).then_some(())
    })
    .await;
    let tokens: Vec<String> =
        f.upstream.requests().iter().filter_map(|r| r.header("authorization").map(str::to_owned)).collect();
    let distinct: std::collections::BTreeSet<&String> = tokens.iter().collect();
    assert_eq!(distinct.len(), 2, "the new token replaced the old: {distinct:?}");
    assert!(tokens.len() > 3, "many calls on two tokens: {}", tokens.len());
}

#[tokio::test]
async fn a_service_account_the_token_endpoint_refuses_fails_over_to_the_next_channel() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    models(&gw).await;
    let google = upstream.google();
    let revoked = google.unknown_service_account("revoked");
    let private_key: Value = serde_json::from_str(&revoked).expect("key JSON");
    let private_key = private_key["private_key"].as_str().expect("a private key").to_owned();
    gw.admin().create_channel(vertex_channel(&upstream, "revoked", revoked, 10)).await.expect("channel create");
    let good = vertex_channel(&upstream, "good", google.service_account("good"), 0);
    let good = gw.admin().create_channel(good).await.expect("channel create").into_inner().id;
    upstream.set_script(script(None));
    gw.synced().await;

    for client in [Client::Chat, Client::Messages] {
        let reply = send(&gw, client, &body(client, CLAUDE, false, false)).await;
        assert_eq!(answer(client, false, &reply).0, REPLY);
        let body_line = private_key.lines().nth(1).unwrap_or_default();
        assert!(!reply.text.contains(body_line), "no part of the key reaches the client");
    }
    let exchanges = google.exchanges();
    let refused: Vec<_> = exchanges.iter().filter(|e| !e.granted).collect();
    assert!(!refused.is_empty(), "the revoked key was tried: {exchanges:#?}");
    assert!(refused.iter().all(|e| e.claims["iss"] == "revoked@mock-project.iam.gserviceaccount.com"));
    assert_eq!(google.tokens_granted(), 1, "the good channel's one token");
    let records = gw.wait_for_usage(2).await;
    assert!(records.iter().all(|r| r["channel_id"] == good.as_str()), "billed to the channel that answered");
    assert_eq!(upstream.request_count(), 2, "the refused channel sent nothing upstream");
}

#[tokio::test]
async fn gemini_clients_count_tokens_on_vertex_with_the_channels_token() {
    let f = fixture(Upstream::Vertex).await;
    let url = format!("http://{}/v1beta/models/{GEMINI}:countTokens", f.gw.cluster.data_planes[0].addr);
    let body = json!({ "contents": [{ "role": "user", "parts": [{ "text": "How many pebbles?" }] }] });
    let response =
        f.gw.cluster.http().post(url).header("x-goog-api-key", &f.gw.key).json(&body).send().await.expect("count");
    assert_eq!(response.status(), 200);
    let counted: Value = response.json().await.expect("JSON");
    assert_eq!(counted["totalTokens"], PROMPT, "Vertex's own count: {counted}");
    let path = format!("/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{GEMINI}:countTokens");
    let sent = sent_to(&f.upstream, &path);
    assert_eq!(sent.len(), 1, "{:#?}", f.upstream.requests());
    assert!(sent[0].header("authorization").is_some_and(|a| a.starts_with("Bearer ya29.")));
    assert_eq!(sent[0].header("x-goog-api-key"), None, "the client's token stays here");
}

#[tokio::test]
async fn each_service_account_of_a_pool_gets_its_own_token() {
    let f = fixture(Upstream::Vertex).await;
    let google = f.upstream.google();
    let second = pb::AddChannelKeyRequest { channel_id: f.channel.clone(), key: google.service_account("second") };
    f.gw.admin().add_channel_key(second).await.expect("add key");
    f.gw.synced().await;

    let chat = body(Client::Chat, GEMINI, false, false);
    for _ in 0..6 {
        assert_eq!(send(&f.gw, Client::Chat, &chat).await.status, 200);
    }
    let issuers: std::collections::BTreeSet<String> =
        google.exchanges().iter().filter_map(|e| e.claims["iss"].as_str().map(str::to_owned)).collect();
    let expected = ["gateway@mock-project.iam.gserviceaccount.com", "second@mock-project.iam.gserviceaccount.com"];
    assert_eq!(issuers, expected.map(str::to_owned).into(), "one exchange per key");
    assert_eq!(google.exchanges().len(), 2, "each key's token is reused");
    let tokens: std::collections::BTreeSet<String> =
        f.upstream.requests().iter().filter_map(|r| r.header("authorization").map(str::to_owned)).collect();
    assert_eq!(tokens.len(), 2, "calls alternate between the two keys' tokens");
}

#[tokio::test]
async fn openai_embeddings_reach_a_gemini_channel_through_embed_content_as_floats_or_base64() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let embedder = pb::Model {
        id: "gemini-embedding-001".into(),
        category: "embedding".into(),
        input_price_micros: 150_000,
        ..Default::default()
    };
    gw.admin().create_model(embedder).await.expect("model create");
    let mut gemini = channel("gemini", "gemini", upstream.google().gemini_base_url(), GEMINI_KEY.into(), 0);
    gemini.models = vec!["gemini-embedding-001".into()];
    gw.admin().create_channel(gemini).await.expect("channel create");
    gw.synced().await;

    let url = format!("http://{}/v1/embeddings", gw.cluster.data_planes[0].addr);
    let ask = |body: Value| gw.cluster.http().post(&url).bearer_auth(&gw.key).json(&body).send();
    let floats =
        ask(json!({"model": "gemini-embedding-001", "input": ["a heron", "forty two pebbles"], "dimensions": 8}))
            .await
            .expect("embeddings");
    assert_eq!(floats.status(), 200);
    let floats: Value = floats.json().await.expect("json");
    assert_eq!(floats["object"], "list", "{floats}");
    assert_eq!(floats["data"].as_array().map(Vec::len), Some(2), "{floats}");
    assert_eq!(floats["data"][1]["index"], 1);
    assert_eq!(floats["data"][0]["embedding"].as_array().map(Vec::len), Some(8), "outputDimensionality sent");
    let prompt = floats["usage"]["prompt_tokens"].as_i64().expect("usage");
    assert!(prompt > 0, "{floats}");

    // The OpenAI SDKs ask for base64: little-endian f32s.
    let packed = ask(json!({"model": "gemini-embedding-001", "input": "a heron", "encoding_format": "base64"}))
        .await
        .expect("embeddings");
    let packed: Value = packed.json().await.expect("json");
    let text = packed["data"][0]["embedding"].as_str().expect("a base64 string");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).expect("base64");
    assert!(!bytes.is_empty() && bytes.len().is_multiple_of(4), "{} bytes", bytes.len());

    let calls = sent_to(&upstream, ":embedContent");
    assert_eq!(calls.len(), 3, "one embedContent per input");
    assert_eq!(calls[0].body["content"]["parts"][0]["text"], "a heron");
    let records = gw.wait_for_usage(2).await;
    for record in &records {
        assert_eq!(record["model"], "gemini-embedding-001", "{record}");
        assert_eq!(record["estimated"], true, "Gemini reports no counts for embeddings: {record}");
    }
    let tokens = records.iter().map(|r| r["prompt_tokens"].as_i64().unwrap_or(0)).max().unwrap_or(0);
    assert_eq!(tokens, prompt, "billed what the answer says");
}

#[tokio::test]
async fn a_gemini_key_refused_as_api_key_invalid_moves_the_pool_to_its_next_key() {
    let f = fixture(Upstream::Gemini).await;
    f.upstream.google().set_api_key("AIza-the-good-one");
    let request = pb::AddChannelKeyRequest { channel_id: f.channel.clone(), key: "AIza-the-good-one".into() };
    f.gw.admin().add_channel_key(request).await.expect("add key");
    f.gw.synced().await;
    for _ in 0..4 {
        let reply = send(&f.gw, Client::Chat, &body(Client::Chat, GEMINI, false, false)).await;
        assert_eq!(reply.status, 200, "the pool's other key answers: {}", reply.text);
    }
    let refused = f
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.headers.iter().any(|(n, v)| n == "x-goog-api-key" && v == GEMINI_KEY))
        .count();
    assert!(refused <= 1, "the refused key is set aside after its 400 API_KEY_INVALID, not tried each time: {refused}");
}

#[tokio::test]
async fn a_revoked_vertex_token_is_exchanged_again_without_setting_the_key_aside() {
    let f = fixture(Upstream::Vertex).await;
    let request = body(Client::Chat, GEMINI, false, false);
    let ask = || send(&f.gw, Client::Chat, &request);
    assert_eq!(ask().await.status, 200);
    assert_eq!(f.upstream.google().tokens_granted(), 1);
    f.upstream.google().revoke_tokens();
    let reply = ask().await;
    assert_eq!(reply.status, 200, "the attempt is made again with a new token: {}", reply.text);
    assert_eq!(f.upstream.google().tokens_granted(), 2);
    let refused = f.upstream.requests().iter().filter(|r| r.path.contains(":generateContent")).count();
    assert_eq!(refused, 3, "the call with the revoked token, then its retry");
    for _ in 0..3 {
        assert_eq!(ask().await.status, 200, "the service account was not set aside");
    }
}
