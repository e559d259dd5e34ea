//! `/v1/realtime` end to end: real Redis, the real control plane and a data
//! plane in-process, the mock realtime provider (`gw_tests::mock::realtime`)
//! over a real WebSocket, and as clients the official OpenAI Python SDK's
//! realtime client (`tests/sdk/openai_realtime.py`) and a plain WebSocket
//! client for what the SDK cannot show (the subprotocol key, refusals
//! before and after the upgrade, a session cut mid-way, concurrent
//! sessions, overlapping and server-started responses, cancels on a
//! refusal or a client gone, and a cancel the upstream never answers). Azure channels are served by the same mock at Azure's
//! addresses, with Azure's `api-key`.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, eventually},
    mock::realtime::{DELTAS, MockRealtime, PARTIAL, TRANSCRIPT, USAGE},
    redis::RedisServer,
};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _, http::HeaderValue};

const UPSTREAM_KEY: &str = "sk-upstream-realtime-0123456789";
const AZURE_KEY: &str = "azure-realtime-key-0123456789abcdef";
const MODEL: &str = "gpt-realtime";
/// The account's starting balance, $10.
const START: i64 = 10_000_000;
/// One mock response at the model's prices: 48 text + 88 audio fresh in
/// at $4 / $32, 32 + 32 cached at $0.40, 30 text + 100 audio out at $16 /
/// $64: 192 + 2816 + 12.8 + 12.8 + 480 + 6400 = 9913.6 → 9914 µ$.
const RESPONSE_COST: i64 = 9_914;
/// A response cancelled mid-way (the mock's `PARTIAL`: the same input,
/// 10 text + 30 audio out): 192 + 2816 + 12.8 + 12.8 + 160 + 1920 = 5113.6
/// → 5114 µ$.
const PARTIAL_COST: i64 = 5_114;
/// What each response reserves before it starts: the data plane's default
/// output bound (4096 tokens) at the model's highest output price ($64).
const RESPONSE_BOUND: i64 = 4_096 * 64;
/// The upstream name of `MODEL` on every channel.
const UPSTREAM_MODEL: &str = "gpt-realtime-2025-08-28";

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn model() -> pb::Model {
    pb::Model {
        id: MODEL.into(),
        category: "realtime".into(),
        input_price_micros: 4_000_000,
        cached_price_micros: 400_000,
        output_price_micros: 16_000_000,
        audio_input_price_micros: 32_000_000,
        audio_cached_price_micros: 400_000,
        audio_output_price_micros: 64_000_000,
        ..Default::default()
    }
}

fn channel(name: &str, base_url: String, priority: i32) -> pb::Channel {
    pb::Channel {
        name: name.into(),
        r#type: "openai".into(),
        base_url,
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: vec![MODEL.into()],
        model_map: [(MODEL.to_owned(), UPSTREAM_MODEL.to_owned())].into(),
        groups: vec!["default".into()],
        weight: 1,
        priority,
        ..Default::default()
    }
}

/// An azure channel on `mock`'s resource endpoint with `settings` (the
/// deployment form or `api_version: v1`), its key sent as `api-key`.
fn azure_channel(mock: &MockRealtime, settings: &[(&str, &str)]) -> pb::Channel {
    let mut settings: Vec<(String, String)> = settings.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    settings.push(("auth".into(), "api-key".into()));
    pb::Channel {
        r#type: "azure".into(),
        base_url: mock.azure_endpoint(),
        api_key: AZURE_KEY.into(),
        settings: settings.into_iter().collect(),
        ..channel("azure-realtime", String::new(), 0)
    }
}

struct Fixture {
    _redis: RedisServer,
    cluster: Cluster,
    mock: MockRealtime,
}

async fn setup() -> Fixture {
    start(|mock| channel("realtime", mock.base_url(), 0)).await
}

/// The fixture with the one channel `channel` makes for its mock.
async fn start(channel: impl FnOnce(&MockRealtime) -> pb::Channel) -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let mock = MockRealtime::start().await.expect("mock realtime");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    admin.create_model(model()).await.expect("model create");
    admin.create_channel(channel(&mock)).await.expect("channel create");
    Fixture { _redis: redis, cluster, mock }
}

/// An account with `balance` and a token bounded only by it, allowed
/// `max_in_flight` at once: (account id, token id, key).
async fn customer(cluster: &Cluster, balance: i64, max_in_flight: u32) -> (String, String, String) {
    let mut admin = cluster.admin();
    let account = pb::CreateAccountRequest {
        name: format!("acme-{max_in_flight}-{balance}"),
        balance_micros: balance,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "default".into(),
        unlimited: true,
        max_in_flight,
        ..Default::default()
    };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    cluster.wait_until_served(0, &created.key).await;
    (account, created.token.unwrap_or_default().id, created.key)
}

fn ws_url(cluster: &Cluster) -> String {
    format!("{}/realtime?model={MODEL}", cluster.base_url(0).replacen("http://", "ws://", 1))
}

/// Opens a session with `key` as a bearer header, or as the browser
/// subprotocol when `subprotocol`; the refusal's status and body otherwise.
async fn open(cluster: &Cluster, key: &str, subprotocol: bool) -> Result<(Socket, Option<String>), (u16, Value)> {
    let mut request = ws_url(cluster).into_client_request().expect("request");
    let (name, value) = if subprotocol {
        ("sec-websocket-protocol", format!("realtime, openai-insecure-api-key.{key}"))
    } else {
        ("authorization", format!("Bearer {key}"))
    };
    request.headers_mut().insert(name, HeaderValue::from_str(&value).expect("header"));
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, response)) => {
            let protocol = response.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok());
            Ok((socket, protocol.map(str::to_owned)))
        }
        Err(tungstenite::Error::Http(response)) => {
            let body = response.body().as_deref().and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
            Err((response.status().as_u16(), body))
        }
        Err(error) => panic!("handshake failed: {error}"),
    }
}

/// Reads server events until one of `kind`; returns it.
async fn until(socket: &mut Socket, kind: &str) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within 10 s"))
            .unwrap_or_else(|| panic!("socket closed before {kind}"))
            .expect("socket error");
        if let tungstenite::Message::Text(text) = message {
            let event: Value = serde_json::from_str(text.as_str()).expect("event json");
            if event["type"] == kind {
                return event;
            }
        }
    }
}

/// Sends client event `kind` on `socket`.
async fn send(socket: &mut Socket, kind: &str) {
    let event = json!({ "type": kind }).to_string();
    socket.send(tungstenite::Message::Text(event.into())).await.expect("send");
}

/// Reads `socket` to its close: the server events before it and the close.
async fn to_close(socket: &mut Socket) -> (Vec<Value>, tungstenite::protocol::CloseFrame) {
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(15), socket.next())
            .await
            .expect("a close within 15 s")
            .expect("a close frame before the end")
            .expect("socket error");
        match message {
            tungstenite::Message::Close(frame) => return (events, frame.expect("a close code")),
            tungstenite::Message::Text(text) => events.push(serde_json::from_str(text.as_str()).expect("event json")),
            _ => {}
        }
    }
}

/// Asks for one response on `socket` and reads it to its `response.done`.
async fn one_response(socket: &mut Socket) -> Value {
    let create = json!({ "type": "response.create" }).to_string();
    socket.send(tungstenite::Message::Text(create.into())).await.expect("send");
    until(socket, "response.done").await
}

/// The token's usage records once there are `n`.
async fn records(cluster: &Cluster, token: &str, n: usize) -> Vec<Value> {
    eventually(&format!("{n} usage records"), Duration::from_secs(15), || async {
        let request = pb::ListUsageRequest { token_id: token.to_owned(), limit: 100, ..Default::default() };
        let items = cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        (items.len() == n).then(|| items.iter().map(harness::json).collect::<Vec<Value>>())
    })
    .await
}

async fn wait_for_balance(cluster: &Cluster, account: &str, balance: i64) {
    eventually("the balance to drop by the responses' cost", Duration::from_secs(15), || async {
        let account = cluster.admin().get_account(pb::GetRequest { id: account.to_owned() }).await.ok()?.into_inner();
        (account.balance_micros == balance).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_openai_sdk_holds_a_session_and_each_response_is_billed_once_at_audio_prices() {
    let f = setup().await;
    let (account, token, key) = customer(&f.cluster, START, 0).await;
    let base_url = f.cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", key.as_str()), ("GW_MODEL", MODEL)];
    let out = harness::sdk("openai_realtime.py", &[], &env).await;

    assert_eq!(out["session"]["id"], "sess_mock");
    let responses = out["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 2, "{out}");
    for response in responses {
        assert_eq!(response["transcript"], TRANSCRIPT);
        assert_eq!(response["deltas"], 2 * DELTAS, "transcript and audio deltas arrive unchanged");
        assert_eq!(response["usage"]["output_token_details"]["audio_tokens"], USAGE.audio_output);
    }
    let handshakes = f.mock.handshakes();
    assert_eq!(handshakes.len(), 1);
    assert_eq!(handshakes[0].authorization.as_deref(), Some(&format!("Bearer {UPSTREAM_KEY}")[..]));
    assert_eq!(handshakes[0].model.as_deref(), Some(UPSTREAM_MODEL), "the mapped model");
    assert_eq!(handshakes[0].path, "/v1/realtime");

    let records = records(&f.cluster, &token, 2).await;
    let mut ids: Vec<&str> = records.iter().filter_map(|r| r["request_id"].as_str()).collect();
    ids.sort_unstable();
    assert!(
        ids[0].ends_with("-1") && ids[1].ends_with("-2") && ids[0][..ids[0].len() - 2] == ids[1][..ids[1].len() - 2]
    );
    for record in &records {
        assert_eq!(record["endpoint"], "/v1/realtime");
        assert_eq!(record["cost_micros"], RESPONSE_COST, "{record}");
        assert_eq!((record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64()), (Some(200), Some(130)));
        assert_eq!(record["audio_prompt_tokens"], USAGE.audio_input);
        assert_eq!(record["audio_completion_tokens"], USAGE.audio_output);
        assert_eq!(record["audio_cached_tokens"], USAGE.audio_cached);
        assert_eq!(record["estimated"], false);
    }
    wait_for_balance(&f.cluster, &account, START - 2 * RESPONSE_COST).await;
}

#[tokio::test]
async fn sessions_are_refused_before_the_upgrade_and_billed_per_response_when_cut() {
    let f = setup().await;
    let (account, token, key) = customer(&f.cluster, START, 1).await;

    // A bad key, a model that is not realtime, a budget too small: HTTP answers.
    let (status, body) = open(&f.cluster, "sk-not-a-key", false).await.expect_err("refused");
    assert_eq!(status, 401);
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    let (_, _, poor) = customer(&f.cluster, 100_000, 0).await;
    let (status, _) = open(&f.cluster, &poor, false).await.expect_err("refused");
    assert_eq!(status, 403, "a response's bound is more than the balance");

    // The browser form: the key as a subprotocol, only `realtime` echoed.
    let (mut socket, protocol) = open(&f.cluster, &key, true).await.expect("session");
    assert_eq!(protocol.as_deref(), Some("realtime"));
    until(&mut socket, "session.created").await;
    let done = one_response(&mut socket).await;
    assert_eq!(done["response"]["usage"]["input_tokens"], USAGE.input);

    // The token may hold one session at a time.
    let (status, _) = open(&f.cluster, &key, false).await.expect_err("second session refused");
    assert_eq!(status, 429);

    // Cut after one response: that response is billed, the slot comes back.
    drop(socket);
    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST);
    wait_for_balance(&f.cluster, &account, START - RESPONSE_COST).await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (f.mock.open_sessions() == 0).then_some(())
    })
    .await;
    let (mut again, _) = eventually("the in-flight slot to come back", Duration::from_secs(10), || async {
        open(&f.cluster, &key, false).await.ok()
    })
    .await;
    until(&mut again, "session.created").await;
}

#[tokio::test]
async fn a_channel_refusing_the_upgrade_is_failed_over() {
    let f = setup().await;
    let down = MockRealtime::start().await.expect("second mock");
    down.refuse_with(503);
    f.cluster.admin().create_channel(channel("down", down.base_url(), 10)).await.expect("channel create");
    let (_, token, key) = customer(&f.cluster, START, 0).await;
    let (mut socket, _) = eventually("both channels to be served", Duration::from_secs(10), || async {
        let opened = open(&f.cluster, &key, false).await.ok()?;
        (!down.handshakes().is_empty()).then_some(opened)
    })
    .await;
    assert!(down.handshakes().iter().all(|h| h.refused), "the higher-priority channel refused");
    until(&mut socket, "session.created").await;
    one_response(&mut socket).await;
    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST);
    assert!(!f.mock.handshakes().is_empty());
}

#[tokio::test]
async fn a_session_whose_budget_runs_out_gets_an_error_event_and_is_closed_with_what_it_used_billed() {
    let f = setup().await;
    // Enough for the first response's bound, not for the second's once the
    // first is paid.
    let balance = RESPONSE_BOUND + RESPONSE_COST / 2;
    let (account, token, key) = customer(&f.cluster, balance, 1).await;
    let (mut socket, _) = open(&f.cluster, &key, false).await.expect("the first response is covered");
    until(&mut socket, "session.created").await;
    let done = one_response(&mut socket).await;
    assert_eq!(done["response"]["status"], "completed", "the response in flight is relayed whole");

    let error = until(&mut socket, "error").await;
    assert!(error["event_id"].as_str().is_some_and(|id| !id.is_empty()), "{error}");
    assert_eq!(error["error"]["type"], "insufficient_quota", "{error}");
    assert_eq!(error["error"]["code"], "insufficient_user_quota", "{error}");
    assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
    assert!(error["error"].get("param").is_some_and(Value::is_null), "{error}");
    let close = loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a close within 10 s")
            .expect("a close frame before the end")
            .expect("socket error");
        match message {
            tungstenite::Message::Close(frame) => break frame.expect("a close code"),
            tungstenite::Message::Text(text) => panic!("an event after the refusal: {text}"),
            _ => {}
        }
    };
    assert_eq!(u16::from(close.code), 1008, "closed for policy");

    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST, "{records:?}");
    assert!(records[0]["request_id"].as_str().is_some_and(|id| id.ends_with("-1")), "{records:?}");
    wait_for_balance(&f.cluster, &account, balance - RESPONSE_COST).await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (f.mock.open_sessions() == 0).then_some(())
    })
    .await;
    // The slot came back: the next session is refused for its budget (403),
    // not for the one in flight (429).
    let (status, body) = eventually("the in-flight slot to come back", Duration::from_secs(10), || async {
        open(&f.cluster, &key, false).await.err().filter(|(status, _)| *status != 429)
    })
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(f.mock.handshakes().len(), 1, "a refused session never reaches the channel");
    assert_eq!(records.len(), 1);
}

#[tokio::test]
async fn an_azure_deployment_holds_an_sdk_session_billed_once() {
    let settings = [("api_version", "2025-04-01-preview"), ("deployment", "realtime-prod")];
    let f = start(|mock| azure_channel(mock, &settings)).await;
    f.mock.azure_key(AZURE_KEY);
    let (account, token, key) = customer(&f.cluster, START, 0).await;
    let base_url = f.cluster.base_url(0);
    let env =
        [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", key.as_str()), ("GW_MODEL", MODEL), ("GW_RESPONSES", "1")];
    let out = harness::sdk("openai_realtime.py", &[], &env).await;

    let responses = out["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 1, "{out}");
    assert_eq!(responses[0]["transcript"], TRANSCRIPT);
    let handshakes = f.mock.handshakes();
    assert_eq!(handshakes.len(), 1, "{handshakes:?}");
    let handshake = &handshakes[0];
    assert!(!handshake.refused, "{handshake:?}");
    assert_eq!(handshake.path, "/openai/realtime");
    assert_eq!(handshake.api_version.as_deref(), Some("2025-04-01-preview"));
    assert_eq!(handshake.model.as_deref(), Some("realtime-prod"), "the deployment is addressed");
    assert_eq!(handshake.api_key.as_deref(), Some(AZURE_KEY));
    assert_eq!(handshake.authorization, None, "azure keys go as api-key only");

    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["endpoint"], "/v1/realtime");
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST, "{records:?}");
    assert_eq!(records[0]["audio_completion_tokens"], USAGE.audio_output);
    wait_for_balance(&f.cluster, &account, START - RESPONSE_COST).await;
}

#[tokio::test]
async fn an_azure_v1_endpoint_is_addressed_by_model_and_refuses_a_wrong_key() {
    let f = start(|mock| azure_channel(mock, &[("api_version", "v1")])).await;
    f.mock.azure_key("another-resource-key");
    let (account, token, key) = customer(&f.cluster, START, 0).await;
    let (status, body) = open(&f.cluster, &key, false).await.expect_err("the resource refuses our key");
    assert_eq!(status, 401, "the upstream's refusal, as an HTTP answer before the upgrade: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("invalid subscription key") && !message.contains(AZURE_KEY), "{body}");
    assert!(f.mock.handshakes().iter().all(|h| h.refused && h.api_key.as_deref() == Some(AZURE_KEY)));

    f.mock.azure_key(AZURE_KEY);
    let (mut socket, _) = eventually("the channel to take sessions again", Duration::from_secs(15), || async {
        open(&f.cluster, &key, false).await.ok()
    })
    .await;
    until(&mut socket, "session.created").await;
    one_response(&mut socket).await;
    let handshake = f.mock.handshakes().into_iter().find(|h| !h.refused).expect("an accepted handshake");
    assert_eq!(handshake.path, "/openai/v1/realtime");
    assert_eq!((handshake.model.as_deref(), handshake.api_version), (Some(UPSTREAM_MODEL), None));
    assert_eq!(handshake.api_key.as_deref(), Some(AZURE_KEY));

    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST, "{records:?}");
    wait_for_balance(&f.cluster, &account, START - RESPONSE_COST).await;
}

#[tokio::test]
async fn overlapping_responses_past_the_budget_are_cancelled_upstream_and_their_partial_usage_billed() {
    let f = setup().await;
    // One response's bound is covered, a second's at once is not.
    let balance = RESPONSE_BOUND + RESPONSE_COST / 2;
    let (account, token, key) = customer(&f.cluster, balance, 1).await;
    f.mock.hold(true);
    let (mut socket, _) = open(&f.cluster, &key, false).await.expect("the first response is covered");
    until(&mut socket, "session.created").await;
    send(&mut socket, "response.create").await;
    send(&mut socket, "response.create").await;

    let (events, close) = to_close(&mut socket).await;
    assert_eq!(u16::from(close.code), 1008, "closed for policy");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let error = events.iter().find(|e| e["type"] == "error").unwrap_or_else(|| panic!("no error event: {kinds:?}"));
    assert_eq!(error["error"]["code"], "insufficient_user_quota", "{error}");
    let created: Vec<&Value> = events.iter().filter(|e| e["type"] == "response.created").collect();
    assert_eq!(created.len(), 2, "both responses started upstream: {kinds:?}");
    let error_at = kinds.iter().position(|k| *k == "error");
    let second_at = events.iter().position(|e| e["type"] == "response.created" && e["response"]["id"] == "resp_2");
    assert!(second_at < error_at, "the refusal answers the second response: {kinds:?}");
    let mut done: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "response.done")
        .map(|e| (e["response"]["id"].as_str().unwrap_or(""), e["response"]["status"].as_str().unwrap_or("")))
        .collect();
    done.sort_unstable();
    assert_eq!(done, [("resp_1", "cancelled"), ("resp_2", "cancelled")], "each cancel's response.done is relayed");
    let mut cancels = f.mock.cancels();
    cancels.sort_unstable();
    assert_eq!(cancels, [Some("resp_1".to_owned()), Some("resp_2".to_owned())], "each open response is cancelled");

    // What each used is billed, once; the account spent no more than the
    // session held reserved.
    let records = records(&f.cluster, &token, 2).await;
    for record in &records {
        assert_eq!(record["cost_micros"], PARTIAL_COST, "{record}");
        assert_eq!(record["completion_tokens"], PARTIAL.output, "{record}");
        assert_eq!(record["audio_completion_tokens"], PARTIAL.audio_output, "{record}");
    }
    let mut ids: Vec<&str> = records.iter().filter_map(|r| r["request_id"].as_str()).collect();
    ids.sort_unstable();
    assert!(ids[0].ends_with("-1") && ids[1].ends_with("-2"), "{ids:?}");
    let spent: i64 = records.iter().filter_map(|r| r["cost_micros"].as_i64()).sum();
    assert!(spent <= RESPONSE_BOUND, "spent {spent} past the one reservation the session held");
    wait_for_balance(&f.cluster, &account, balance - 2 * PARTIAL_COST).await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (f.mock.open_sessions() == 0).then_some(())
    })
    .await;
    let (status, body) = eventually("the in-flight slot to come back", Duration::from_secs(10), || async {
        open(&f.cluster, &key, false).await.err().filter(|(status, _)| *status != 429)
    })
    .await;
    assert_eq!(status, 403, "the rest of the balance covers no response: {body}");
}

#[tokio::test]
async fn a_client_gone_mid_response_has_that_response_cancelled_and_billed_what_it_used() {
    let f = setup().await;
    let (account, token, key) = customer(&f.cluster, START, 1).await;
    f.mock.hold(true);
    let (mut socket, _) = open(&f.cluster, &key, false).await.expect("session");
    until(&mut socket, "session.created").await;
    send(&mut socket, "response.create").await;
    until(&mut socket, "response.output_audio.delta").await;
    drop(socket);

    eventually("the upstream to hear the cancel", Duration::from_secs(10), || async {
        (f.mock.cancels() == [Some("resp_1".to_owned())]).then_some(())
    })
    .await;
    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], PARTIAL_COST, "{records:?}");
    assert_eq!(records[0]["status"], 499, "{records:?}");
    assert_eq!(records[0]["prompt_tokens"], PARTIAL.input, "{records:?}");
    wait_for_balance(&f.cluster, &account, START - PARTIAL_COST).await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (f.mock.open_sessions() == 0).then_some(())
    })
    .await;
    let (mut again, _) = eventually("the in-flight slot to come back", Duration::from_secs(10), || async {
        open(&f.cluster, &key, false).await.ok()
    })
    .await;
    until(&mut again, "session.created").await;
}

#[tokio::test]
async fn a_response_the_server_starts_itself_is_billed_beside_the_clients() {
    let f = setup().await;
    let (account, token, key) = customer(&f.cluster, START, 1).await;
    f.mock.hold(true);
    let (mut socket, _) = open(&f.cluster, &key, false).await.expect("session");
    until(&mut socket, "session.created").await;
    // The client's response, then a turn its voice activity ends: two at once.
    send(&mut socket, "response.create").await;
    send(&mut socket, "input_audio_buffer.commit").await;
    until(&mut socket, "input_audio_buffer.committed").await;
    let second = until(&mut socket, "response.created").await;
    let second =
        if second["response"]["id"] == "resp_1" { until(&mut socket, "response.created").await } else { second };
    assert_eq!(second["response"]["id"], "resp_2");
    f.mock.hold(false);
    let mut done = vec![until(&mut socket, "response.done").await, until(&mut socket, "response.done").await];
    done.sort_by_key(|d| d["response"]["id"].as_str().map(str::to_owned));
    assert!(done.iter().all(|d| d["response"]["status"] == "completed"), "{done:?}");

    let records = records(&f.cluster, &token, 2).await;
    assert!(records.iter().all(|r| r["cost_micros"] == RESPONSE_COST && r["status"] == 200), "{records:?}");
    wait_for_balance(&f.cluster, &account, START - 2 * RESPONSE_COST).await;
    assert!(f.mock.cancels().is_empty(), "nothing was cancelled");
}

#[tokio::test]
async fn a_cancel_never_answered_ends_the_session_after_a_bounded_wait_billing_nothing_and_counting_it() {
    let f = setup().await;
    let (account, token, key) = customer(&f.cluster, START, 1).await;
    f.mock.hold(true);
    f.mock.ignore_cancels();
    let (mut socket, _) = open(&f.cluster, &key, false).await.expect("session");
    until(&mut socket, "session.created").await;
    send(&mut socket, "response.create").await;
    until(&mut socket, "response.created").await;
    drop(socket);

    eventually("the upstream session to close after the drain", Duration::from_secs(20), || async {
        (f.mock.open_sessions() == 0).then_some(())
    })
    .await;
    assert_eq!(f.mock.cancels(), [Some("resp_1".to_owned())]);
    assert_eq!(unbilled(f.cluster.data_planes[0].admin_addr).await, 1, "the response without usage is counted");
    let (mut again, _) = eventually("the in-flight slot to come back", Duration::from_secs(10), || async {
        open(&f.cluster, &key, false).await.ok()
    })
    .await;
    // The next session's response is billed: the one before it was not.
    until(&mut again, "session.created").await;
    f.mock.hold(false);
    one_response(&mut again).await;
    let records = records(&f.cluster, &token, 1).await;
    assert_eq!(records[0]["cost_micros"], RESPONSE_COST, "{records:?}");
    wait_for_balance(&f.cluster, &account, START - RESPONSE_COST).await;
}

/// The realtime responses the data plane with admin listener `admin` has
/// counted as unbilled.
async fn unbilled(admin: Option<std::net::SocketAddr>) -> u64 {
    let admin = admin.expect("the data plane's admin listener");
    let text = reqwest::get(format!("http://{admin}/metrics")).await.expect("/metrics").text().await.expect("body");
    text.lines()
        .filter(|line| line.starts_with("gw_realtime_unbilled_responses_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
