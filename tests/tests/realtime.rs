//! `/v1/realtime` end to end: real Redis, the real control plane and a data
//! plane in-process, the mock realtime provider (`gw_tests::mock::realtime`)
//! over a real WebSocket, and as clients the official OpenAI Python SDK's
//! realtime client (`tests/sdk/openai_realtime.py`) and a plain WebSocket
//! client for what the SDK cannot show (the subprotocol key, refusals
//! before the upgrade, a session cut mid-way, concurrent sessions).

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, eventually},
    mock::realtime::{DELTAS, MockRealtime, TRANSCRIPT, USAGE},
    redis::RedisServer,
};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _, http::HeaderValue};

const UPSTREAM_KEY: &str = "sk-upstream-realtime-0123456789";
const MODEL: &str = "gpt-realtime";
/// The account's starting balance, $10.
const START: i64 = 10_000_000;
/// One mock response at the model's prices: 48 text + 88 audio fresh in
/// at $4 / $32, 32 + 32 cached at $0.40, 30 text + 100 audio out at $16 /
/// $64: 192 + 2816 + 12.8 + 12.8 + 480 + 6400 = 9913.6 → 9914 µ$.
const RESPONSE_COST: i64 = 9_914;

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
        model_map: [(MODEL.to_owned(), "gpt-realtime-2025-08-28".to_owned())].into(),
        groups: vec!["default".into()],
        weight: 1,
        priority,
        ..Default::default()
    }
}

struct Fixture {
    _redis: RedisServer,
    cluster: Cluster,
    mock: MockRealtime,
}

async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let mock = MockRealtime::start().await.expect("mock realtime");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    admin.create_model(model()).await.expect("model create");
    admin.create_channel(channel("realtime", mock.base_url(), 0)).await.expect("channel create");
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
    assert_eq!(handshakes[0].model.as_deref(), Some("gpt-realtime-2025-08-28"), "the mapped model");

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
    let (status, body) = open(&f.cluster, "sk-not-a-key", false).await.err().expect("refused");
    assert_eq!(status, 401);
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    let (_, _, poor) = customer(&f.cluster, 100_000, 0).await;
    let (status, _) = open(&f.cluster, &poor, false).await.err().expect("refused");
    assert_eq!(status, 403, "a response's bound is more than the balance");

    // The browser form: the key as a subprotocol, only `realtime` echoed.
    let (mut socket, protocol) = open(&f.cluster, &key, true).await.expect("session");
    assert_eq!(protocol.as_deref(), Some("realtime"));
    until(&mut socket, "session.created").await;
    let done = one_response(&mut socket).await;
    assert_eq!(done["response"]["usage"]["input_tokens"], USAGE.input);

    // The token may hold one session at a time.
    let (status, _) = open(&f.cluster, &key, false).await.err().expect("second session refused");
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
