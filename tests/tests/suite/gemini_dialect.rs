//! The Gemini API for Gemini clients, driven with raw HTTP through a real
//! gateway: `generateContent`, `streamGenerateContent` as SSE (`alt=sse`)
//! and as one JSON array, `countTokens` and the model list, translated to
//! an `openai` and an `anthropic` channel of the mock; the key as
//! `x-goog-api-key`, `key=` or a bearer token; and every row of the error
//! catalogue in Google's error shape with the catalogue's status and text.

use crate::support;

use std::time::Duration;

use gw_proto::pb;
use gw_tests::{
    harness::eventually,
    mock::upstream::{MockUpstream, Recorded},
};
use serde_json::{Value, json};
use support::{Gateway, MODEL, Reply, UPSTREAM_KEY};

const REPLY: &str = "Hello from the mock upstream";
/// gpt-4o at $2.5 / $10 per 1M tokens, the mock's 11 prompt + 7
/// completion tokens: ceil(11 × 2.5 + 7 × 10) = 98 µ$ per request.
const COST: i64 = 98;

/// How a request carries the key.
#[derive(Clone, Copy)]
enum Key<'a> {
    Goog(&'a str),
    Query(&'a str),
    Bearer(&'a str),
    None,
}

/// A gateway whose one channel, of `kind`, is the mock; `gpt-4o` maps to
/// `upstream-model` on it.
async fn gateway(upstream: &MockUpstream, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &["--type", kind, "--map", "gpt-4o=upstream-model"]).await;
    gw.synced().await;
    gw
}

/// Sends `body` (GET when `None`) to `path` with `key`.
async fn send(gw: &Gateway, path: &str, key: Key<'_>, body: Option<&Value>) -> Reply {
    let mut url = format!("http://{}{path}", gw.cluster.data_planes[0].addr);
    if let Key::Query(key) = key {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&format!("key={key}"));
    }
    let http = gw.cluster.http();
    let mut request = match body {
        Some(body) => http.post(url).json(body),
        None => http.get(url),
    };
    request = match key {
        Key::Goog(key) => request.header("x-goog-api-key", key),
        Key::Bearer(key) => request.bearer_auth(key),
        Key::Query(_) | Key::None => request,
    };
    let response = request.send().await.expect("request to the data plane");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

fn ask() -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.2},
    })
}

/// The text of a Gemini answer's (or chunk's) first candidate.
fn text_of(answer: &Value) -> String {
    let parts = answer.pointer("/candidates/0/content/parts").and_then(Value::as_array);
    parts.into_iter().flatten().filter_map(|p| p["text"].as_str()).collect()
}

/// The chunks of an SSE body, each a JSON answer.
fn sse_chunks(text: &str) -> Vec<Value> {
    text.split("\r\n\r\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            let data = event.strip_prefix("data: ").unwrap_or_else(|| panic!("not an SSE data event: {event:?}"));
            serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"))
        })
        .collect()
}

fn checked_usage(last: &Value) {
    assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
    assert_eq!(last["usageMetadata"]["promptTokenCount"], 11, "{last}");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 7, "{last}");
    assert_eq!(last["usageMetadata"]["totalTokenCount"], 18, "{last}");
}

fn upstream_path(kind: &str) -> &'static str {
    if kind == "anthropic" { "/v1/messages" } else { "/v1/chat/completions" }
}

async fn generate_and_stream_through(kind: &str) {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, kind).await;
    let base = format!("/v1beta/models/{MODEL}");

    let whole = send(&gw, &format!("{base}:generateContent"), Key::Goog(&gw.key), Some(&ask())).await;
    assert_eq!(whole.status, 200, "{kind}: {}", whole.text);
    let answer = whole.json();
    assert_eq!(text_of(&answer), REPLY, "{kind}: {answer}");
    assert_eq!(answer["candidates"][0]["content"]["role"], "model");
    assert_eq!(answer["modelVersion"], MODEL, "the model as the client named it");
    checked_usage(&answer);

    let sse = send(&gw, &format!("{base}:streamGenerateContent?alt=sse"), Key::Goog(&gw.key), Some(&ask())).await;
    assert_eq!(sse.status, 200, "{kind}: {}", sse.text);
    assert!(sse.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")), "{:?}", sse.headers);
    let chunks = sse_chunks(&sse.text);
    assert!(chunks.len() > 1, "{kind}: streamed in pieces: {}", sse.text);
    assert_eq!(chunks.iter().map(text_of).collect::<String>(), REPLY);
    checked_usage(chunks.last().expect("a last chunk"));

    let array = send(&gw, &format!("{base}:streamGenerateContent"), Key::Query(&gw.key), Some(&ask())).await;
    assert_eq!(array.status, 200, "{kind}: {}", array.text);
    assert!(array.header("content-type").is_some_and(|t| t.starts_with("application/json")));
    assert!(array.text.starts_with('[') && array.text.ends_with(']'), "{}", array.text);
    let chunks: Vec<Value> = serde_json::from_str(&array.text).expect("one JSON array");
    assert_eq!(chunks.iter().map(text_of).collect::<String>(), REPLY);
    checked_usage(chunks.last().expect("a last chunk"));

    let requests = upstream.requests();
    let sent: Vec<&Recorded> = requests.iter().filter(|r| r.path == upstream_path(kind)).collect();
    assert_eq!(sent.len(), 3, "{kind}: every call was translated to the channel's dialect: {requests:?}");
    for request in &sent {
        assert_eq!(request.body["model"], "upstream-model", "the model is mapped");
        assert!(request.query.as_deref().is_none_or(|q| !q.contains("key=")), "the client key stays here");
        assert!(!format!("{:?} {}", request.headers, request.body).contains(&gw.key), "the client key leaked");
    }
    let prompt = sent[0].body.to_string();
    assert!(prompt.contains("Be brief.") && prompt.contains("\"hi\""), "{kind}: {prompt}");

    let records = gw.wait_for_usage(3).await;
    let mut endpoints: Vec<&str> = records.iter().filter_map(|r| r["endpoint"].as_str()).collect();
    endpoints.sort_unstable();
    assert_eq!(
        endpoints,
        [
            "/v1beta/models:generateContent",
            "/v1beta/models:streamGenerateContent",
            "/v1beta/models:streamGenerateContent"
        ]
    );
    for record in &records {
        assert_eq!((record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()), (Some(11), Some(7)));
        assert_eq!(record["cost_micros"].as_i64(), Some(COST), "{record}");
    }
    let want = 100_000_000 - 3 * COST;
    eventually("the balance to drop by what was billed", Duration::from_secs(15), || async {
        (gw.balance().await == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn gemini_requests_are_answered_whole_and_streamed_from_an_openai_channel() {
    generate_and_stream_through("openai").await;
}

#[tokio::test]
async fn gemini_requests_are_answered_whole_and_streamed_from_an_anthropic_channel() {
    generate_and_stream_through("anthropic").await;
}

#[tokio::test]
async fn function_calls_come_back_with_ids_and_their_responses_reach_the_channel_as_tool_results() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    upstream.set_script(gw_tests::mock::upstream::Script {
        tool_use: Some(gw_tests::mock::messages::ToolUse { name: None, input: json!({"city": "Paris"}) }),
        ..Default::default()
    });
    let mut body = ask();
    body["tools"] = json!([{"functionDeclarations": [{
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]},
    }]}]);
    let path = format!("/v1beta/models/{MODEL}:generateContent");
    let reply = send(&gw, &path, Key::Goog(&gw.key), Some(&body)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let answer = reply.json();
    let call = answer
        .pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .and_then(|parts| parts.iter().find_map(|p| p.get("functionCall")).cloned());
    let call = call.unwrap_or_else(|| panic!("a function call: {answer}"));
    assert_eq!(call["name"], "get_weather", "{answer}");
    assert_eq!(call["args"], json!({"city": "Paris"}));
    assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()), "{call}");
    let sent = upstream.last_request().expect("the first turn");
    assert_eq!(sent.body["tools"][0]["name"], "get_weather", "{}", sent.body);
    assert_eq!(sent.body["tools"][0]["input_schema"]["properties"]["city"]["type"], "string");

    // The next turn: the call and its response, as Gemini CLI sends them.
    body["contents"] = json!([
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": call}]},
        {"role": "user", "parts": [{"functionResponse": {"id": call["id"], "name": "get_weather", "response": {"output": "sunny"}}}]},
    ]);
    let reply = send(&gw, &path, Key::Goog(&gw.key), Some(&body)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let sent = upstream.last_request().expect("the second turn");
    let blocks: Vec<&Value> = sent.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .collect();
    let result = blocks.iter().find(|b| b["type"] == "tool_result").unwrap_or_else(|| panic!("{}", sent.body));
    let called = blocks.iter().find(|b| b["type"] == "tool_use").unwrap_or_else(|| panic!("{}", sent.body));
    assert_eq!(result["tool_use_id"], called["id"], "{}", sent.body);
    assert!(result["content"].to_string().contains("sunny"), "{}", sent.body);
}

#[tokio::test]
async fn tokens_are_counted_free_and_models_are_listed_in_geminis_shape() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;

    for (path, body) in [
        (format!("/v1beta/models/{MODEL}:countTokens"), json!({"contents": ask()["contents"]})),
        (format!("/v1/models/{MODEL}:countTokens"), json!({"generateContentRequest": ask()})),
    ] {
        let reply = send(&gw, &path, Key::Goog(&gw.key), Some(&body)).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.text);
        let prompt = gw_tests::mock::upstream::Script::default().prompt_tokens;
        assert_eq!(reply.json()["totalTokens"], prompt, "the channel's own count: {}", reply.text);
    }
    // Translated to the messages API's count, which the channel answers.
    let asked = upstream.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    for request in &asked {
        assert!(request.path.ends_with("/messages/count_tokens"), "{}", request.path);
        assert_eq!(request.body["model"], "upstream-model", "the channel's name for it: {}", request.body);
        assert!(request.body["messages"][0]["content"].to_string().contains("hi"), "{}", request.body);
        assert!(request.body.get("max_tokens").is_none(), "a count takes no max_tokens: {}", request.body);
    }

    let list = send(&gw, "/v1beta/models", Key::Goog(&gw.key), None).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let models = list.json();
    assert_eq!(models["models"][0]["name"], format!("models/{MODEL}"), "{models}");
    let methods = &models["models"][0]["supportedGenerationMethods"];
    assert!(methods.as_array().is_some_and(|m| m.contains(&json!("streamGenerateContent"))), "{models}");
    let one = send(&gw, &format!("/v1beta/models/{MODEL}"), Key::Query(&gw.key), None).await;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json()["name"], format!("models/{MODEL}"));
    let missing = send(&gw, "/v1beta/models/gpt-nonexistent", Key::Goog(&gw.key), None).await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    assert_eq!(missing.json()["error"]["status"], "NOT_FOUND");

    // Counting and listing bill nothing; one generate call bills once.
    let reply = send(&gw, &format!("/v1/models/{MODEL}:generateContent"), Key::Bearer(&gw.key), Some(&ask())).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let records = gw.wait_for_usage(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.usage().await.len(), 1, "only the generate call was billed: {records:?}");
}

#[tokio::test]
async fn the_key_is_read_from_x_goog_api_key_key_or_a_bearer_token() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let path = format!("/v1beta/models/{MODEL}:generateContent");
    for key in [Key::Goog(&gw.key), Key::Query(&gw.key), Key::Bearer(&gw.key)] {
        let reply = send(&gw, &path, key, Some(&ask())).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let reply = send(&gw, &path, Key::None, Some(&ask())).await;
    assert_eq!(reply.status, 401);
    // `key=` is Gemini's: other APIs pass their query on, so they do not take it.
    let reply = send(&gw, "/v1/chat/completions", Key::Query(&gw.key), Some(&support::chat_body(false))).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
}

#[tokio::test]
async fn every_client_dialect_reaches_a_gemini_channel_and_gemini_counts_there() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    let channel = pb::Channel {
        name: "gemini".into(),
        r#type: "gemini".into(),
        base_url: upstream.google().gemini_base_url(),
        api_key: gw_tests::mock::google::auth::GEMINI_KEY.into(),
        has_key: true,
        models: vec![MODEL.into()],
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        model_map: [(MODEL.to_owned(), "gemini-2.5-flash".to_owned())].into(),
        ..Default::default()
    };
    gw.admin().create_channel(channel).await.expect("channel create");
    gw.synced().await;
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }}]);

    for stream in [false, true] {
        let mut body = support::chat_body(stream);
        body["tools"] = tools.clone();
        body["stream_options"] = if stream { json!({"include_usage": true}) } else { Value::Null };
        let reply = gw.post(0, "/v1/chat/completions", Some(&gw.key), &body).await;
        assert_eq!(reply.status, 200, "chat, stream {stream}: {}", reply.text);
        let text = if stream {
            support::streamed_text(&reply.text)
        } else {
            support::str_field(&reply.json()["choices"][0]["message"], "content")
        };
        assert_eq!(text, REPLY, "chat, stream {stream}: {}", reply.text);

        let messages = json!({"model": MODEL, "max_tokens": 64, "stream": stream, "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]});
        let url = format!("http://{}/v1/messages", gw.cluster.data_planes[0].addr);
        let response = gw
            .cluster
            .http()
            .post(url)
            .header("x-api-key", &gw.key)
            .header("anthropic-version", "2023-06-01")
            .json(&messages)
            .send()
            .await
            .expect("messages request");
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap_or_default();
        assert!(text.contains("Hello") && text.contains("upstream"), "messages, stream {stream}: {text}");
    }
    let requests = upstream.requests();
    let sent: Vec<&Recorded> = requests.iter().filter(|r| r.path.contains("/models/gemini-2.5-flash:")).collect();
    assert_eq!(sent.len(), 4, "{requests:?}");
    assert_eq!(sent[0].body["tools"][0]["functionDeclarations"][0]["name"], "get_weather", "{}", sent[0].body);
    assert_eq!(sent[0].body["contents"][0], json!({"role": "user", "parts": [{"text": "hi"}]}));
    assert!(sent[2].path.ends_with(":streamGenerateContent"), "{}", sent[2].path);
    assert_eq!(sent[1].body["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
    // Gemini clients: passed through whole, re-framed when streamed as an
    // array; counting is the channel's.
    let base = format!("/v1beta/models/{MODEL}");
    let whole = send(&gw, &format!("{base}:generateContent"), Key::Goog(&gw.key), Some(&ask())).await;
    assert_eq!(whole.status, 200, "{}", whole.text);
    assert_eq!(text_of(&whole.json()), REPLY);
    let array = send(&gw, &format!("{base}:streamGenerateContent"), Key::Goog(&gw.key), Some(&ask())).await;
    let chunks: Vec<Value> = serde_json::from_str(&array.text).unwrap_or_else(|e| panic!("{e}: {}", array.text));
    assert_eq!(chunks.iter().map(text_of).collect::<String>(), REPLY);
    checked_usage(chunks.last().expect("a last chunk"));
    let count =
        send(&gw, &format!("{base}:countTokens"), Key::Goog(&gw.key), Some(&json!({"contents": ask()["contents"]})))
            .await;
    assert_eq!(count.status, 200, "{}", count.text);
    assert_eq!(count.json()["totalTokens"], 11, "the mock's count: {}", count.text);
    let counted = upstream.last_request().expect("the count");
    assert_eq!(counted.path, "/v1beta/models/gemini-2.5-flash:countTokens");
    assert_eq!(counted.header("x-goog-api-key"), Some(gw_tests::mock::google::auth::GEMINI_KEY));

    let records = gw.wait_for_usage(6).await;
    for record in &records {
        assert_eq!(
            (record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()),
            (Some(11), Some(7)),
            "{record}"
        );
    }
}

/// Checks `reply` against a catalogue row in Google's error shape:
/// `{"error":{"code","message","status"}}` with the catalogue's status and
/// exact text (plus the request id, but for `Invalid URL`).
fn check(what: &str, reply: &Reply, status: u16, name: &str, message: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.text);
    let body = reply.json();
    let error = body["error"].as_object().unwrap_or_else(|| panic!("{what}: {body}"));
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{what}: {body}");
    let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "status"], "{what}: {body}");
    assert_eq!(error["code"], status, "{what}: {body}");
    assert_eq!(error["status"], name, "{what}: {body}");
    let id = reply.request_id();
    let text =
        if message.starts_with("Invalid URL") { message.to_owned() } else { format!("{message} (request id: {id})") };
    assert_eq!(error["message"], text.as_str(), "{what}");
    assert!(!reply.text.contains(UPSTREAM_KEY), "{what}: upstream key leaked");
}

async fn account(gw: &Gateway, name: &str, balance_micros: i64, groups: &[&str]) -> String {
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros,
        groups: groups.iter().map(|g| (*g).into()).collect(),
        ..Default::default()
    };
    gw.admin().create_account(request).await.expect("account create").into_inner().id
}

async fn token(gw: &Gateway, request: pb::CreateTokenRequest) -> String {
    gw.admin().create_token(request).await.expect("token create").into_inner().key
}

#[tokio::test]
async fn every_catalogue_row_is_in_geminis_error_shape_with_the_same_status_and_text() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    let mut admin = gw.admin();
    let lonely = pb::Model { id: "gpt-lonely".into(), category: "chat".into(), ..Default::default() };
    admin.create_model(lonely).await.expect("model create");
    admin.create_group(pb::Group { deprecated: true, ..support::group("old") }).await.expect("group create");
    let quota_spent = token(&gw, pb::CreateTokenRequest { unlimited: false, ..support::token(&gw.account) }).await;
    let poor = account(&gw, "poor", 0, &["default"]).await;
    let poor = token(&gw, support::token(&poor)).await;
    let restricted =
        token(&gw, pb::CreateTokenRequest { models: vec!["gpt-other".into()], ..support::token(&gw.account) }).await;
    let narrow = account(&gw, "narrow", 10_000_000, &["default", "vip"]).await;
    let narrow_vip = token(&gw, pb::CreateTokenRequest { group: "vip".into(), ..support::token(&narrow) }).await;
    let update = pb::UpdateAccountRequest {
        id: narrow.clone(),
        set_groups: true,
        groups: vec!["default".into()],
        ..Default::default()
    };
    admin.update_account(update).await.expect("account update");
    let oldies = account(&gw, "oldies", 10_000_000, &["old"]).await;
    let deprecated = token(&gw, pb::CreateTokenRequest { group: "old".into(), ..support::token(&oldies) }).await;
    let fenced =
        token(&gw, pb::CreateTokenRequest { allow_ips: vec!["10.9.8.7".into()], ..support::token(&gw.account) }).await;
    let rate_limit = Some(pb::RateLimit { max_requests: 1, window_minutes: 1 });
    let limited = token(&gw, pb::CreateTokenRequest { rate_limit, ..support::token(&gw.account) }).await;
    gw.synced().await;

    let path = |model: &str| format!("/v1beta/models/{model}:generateContent");
    let ok = path(MODEL);
    let body = ask();
    let key = Key::Goog(&gw.key);

    let reply = send(&gw, &ok, Key::None, Some(&body)).await;
    check("no key", &reply, 401, "UNAUTHENTICATED", "未提供令牌");
    let reply = send(&gw, &ok, Key::Goog("sk-not-a-token-of-this-gateway"), Some(&body)).await;
    check("unknown key", &reply, 401, "UNAUTHENTICATED", "无效的令牌");
    let reply = send(&gw, &ok, Key::Query(&quota_spent), Some(&body)).await;
    check("token quota used up", &reply, 403, "PERMISSION_DENIED", "该令牌额度已用尽");
    let reply = send(&gw, &ok, Key::Goog(&poor), Some(&body)).await;
    check("balance too low", &reply, 403, "PERMISSION_DENIED", "用户额度不足, 剩余额度: ＄0.000000");
    let reply = send(&gw, &ok, Key::Goog(&restricted), Some(&body)).await;
    check("model outside the allowlist", &reply, 403, "PERMISSION_DENIED", &format!("该令牌无权访问模型 {MODEL}"));
    let reply = send(&gw, &path("gpt-nonexistent"), key, Some(&body)).await;
    check("model not in the catalogue", &reply, 404, "NOT_FOUND", "模型不存在: gpt-nonexistent");
    let reply = send(&gw, &ok, Key::Goog(&narrow_vip), Some(&body)).await;
    check("group the account may not use", &reply, 403, "PERMISSION_DENIED", "无权访问 vip 分组");
    let reply = send(&gw, &ok, Key::Goog(&deprecated), Some(&body)).await;
    check("deprecated group", &reply, 403, "PERMISSION_DENIED", "分组 old 已被弃用");
    let reply = send(&gw, &ok, Key::Goog(&fenced), Some(&body)).await;
    check("source address", &reply, 403, "PERMISSION_DENIED", "您的 IP 不在令牌允许访问的列表中");
    let unknown = format!("/v1beta/models/{MODEL}:embedEverything");
    let reply = send(&gw, &unknown, key, Some(&body)).await;
    check("unknown method", &reply, 404, "NOT_FOUND", &format!("Invalid URL (POST {unknown})"));
    let reply = send(&gw, &path("gpt-lonely"), key, Some(&body)).await;
    check("no channel", &reply, 503, "UNAVAILABLE", "分组 default 下模型 gpt-lonely 无可用渠道");
    let reply = send(&gw, &ok, key, Some(&json!({"generationConfig": {}}))).await;
    check("no contents", &reply, 400, "INVALID_ARGUMENT", "field \"contents\" is required");
    let reply = send(&gw, &ok, key, Some(&json!([1]))).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.json()["error"]["status"], "INVALID_ARGUMENT");

    let reply = send(&gw, &ok, Key::Goog(&limited), Some(&body)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let reply = send(&gw, &ok, Key::Goog(&limited), Some(&body)).await;
    check("rate limit", &reply, 429, "RESOURCE_EXHAUSTED", "您已达到请求数限制:1分钟内最多请求1次");
    assert!(reply.header("retry-after").is_some(), "a 429 says when to come back");

    upstream.fail_next(502, 100);
    let reply = send(&gw, &ok, key, Some(&body)).await;
    let message = "upstream error: scripted failure of the mock upstream (502 Bad Gateway)";
    check("upstream failure after retries", &reply, 502, "UNAVAILABLE", message);
    upstream.fail_next(0, 0);
    let reply = send(&gw, &format!("/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"), key, Some(&body)).await;
    assert_eq!(reply.status, 200, "the failures are over: {}", reply.text);
}
