//! Client WebSockets live under limits like every other connection, on a
//! real data plane started with them small: a `/v1/responses` socket idle
//! past its idle timeout is closed (and the connection watchdog, with its
//! much shorter keep-alive timeout, leaves it alone until then); a socket
//! past its lifetime gets OpenAI's error event and a close, a response
//! running on it ending as a client that leaves ends, billed what it used
//! (`websocket_connection_limit_reached` on responses, `session_expired` on
//! realtime, where the finished responses stay billed too); and an open
//! socket holds one of `max_connections`, so one more plain connection
//! waits in the backlog until the socket closes. A data plane that stops
//! settles its sockets first: a running response on a responses socket
//! finishes and is billed before the close (1001), and a realtime session
//! gets an error event, has its open response cancelled and billed, and is
//! closed (1001), its record reaching the control plane.

use crate::support;

use std::{net::SocketAddr, path::Path, time::Duration};

use futures_util::{SinkExt as _, StreamExt as _};
use gw_proto::pb;
use gw_tests::{
    harness::eventually,
    mock::{
        realtime::{MockRealtime, PARTIAL},
        upstream::{MockUpstream, Script},
    },
};
use serde_json::{Value, json};
use support::{Gateway, MODEL};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _, http::HeaderValue};

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const REALTIME_MODEL: &str = "gpt-realtime";
/// One mock realtime response at `realtime_model`'s prices (as in the
/// realtime suite): 9913.6 → 9914 µ$.
const REALTIME_RESPONSE_COST: i64 = 9_914;
/// A realtime response cancelled mid-way (the mock's `PARTIAL`): 5114 µ$.
const REALTIME_PARTIAL_COST: i64 = 5_114;
const START_BALANCE: i64 = 100_000_000;

/// A data plane of `gw`'s cluster in `dir` with `configure` applied, once
/// it serves the test token (asked on connections it does not keep, so no
/// idle keep-alive connection holds a slot).
async fn data_plane(
    gw: &Gateway,
    dir: &Path,
    name: &str,
    configure: impl FnOnce(&mut gw_data_plane::Config),
) -> gw_data_plane::Handle {
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let cluster = &gw.cluster;
    let mut config = gw_data_plane::Config::new(listen, cluster.control_plane_url(), dir, cluster.node_key.clone());
    config.node_id = Some(name.into());
    config.admin_listen = Some(listen);
    configure(&mut config);
    let handle = gw_data_plane::start(config).await.expect("the data plane");
    let url = format!("http://{}/v1/models", handle.addr);
    eventually("the data plane to serve the token", Duration::from_secs(15), || async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().ok()?;
        let answer = client.get(&url).bearer_auth(&gw.key).send().await.ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
    handle
}

/// Opens a WebSocket on `path` of `addr` with `key` as a bearer token.
async fn connect(addr: SocketAddr, path: &str, key: &str) -> Socket {
    let mut request = format!("ws://{addr}{path}").into_client_request().expect("request");
    let bearer = HeaderValue::from_str(&format!("Bearer {key}")).expect("header");
    request.headers_mut().insert("authorization", bearer);
    tokio_tungstenite::connect_async(request).await.expect("the upgrade").0
}

/// Reads `socket` until an event of `kind`; returns it.
async fn until(socket: &mut Socket, kind: &str) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(15), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} within 15 s"))
            .unwrap_or_else(|| panic!("socket ended before {kind}"))
            .unwrap_or_else(|error| panic!("socket broke before {kind}: {error}"));
        if let tungstenite::Message::Text(text) = message {
            let event: Value = serde_json::from_str(text.as_str()).expect("event JSON");
            if event["type"] == kind {
                return event;
            }
        }
    }
}

/// Reads `socket` to its close frame: the events before it and the frame.
/// A socket that ends without one (the connection cut) fails the test.
async fn to_close(socket: &mut Socket) -> (Vec<Value>, tungstenite::protocol::CloseFrame) {
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .expect("a close within 20 s")
            .expect("a close frame before the end")
            .expect("a close frame, not a broken connection");
        match message {
            tungstenite::Message::Close(frame) => return (events, frame.expect("a close code")),
            tungstenite::Message::Text(text) => events.push(serde_json::from_str(text.as_str()).expect("event JSON")),
            _ => {}
        }
    }
}

async fn send(socket: &mut Socket, event: Value) {
    socket.send(tungstenite::Message::Text(event.to_string().into())).await.expect("send");
}

fn response_create() -> Value {
    json!({ "type": "response.create", "model": MODEL, "input": "hi" })
}

/// The client connections data plane `handle` has open, by its gauge.
async fn connections_open(handle: &gw_data_plane::Handle) -> u64 {
    let admin = handle.admin_addr.expect("the admin listener");
    let text = reqwest::get(format!("http://{admin}/metrics")).await.expect("/metrics").text().await.expect("body");
    text.lines()
        .filter(|line| line.starts_with("gw_connections_open"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn an_idle_responses_socket_is_closed_after_the_idle_timeout_and_not_before_by_the_watchdog() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    // The watchdog's deadlines are far shorter than the socket's idle
    // timeout: a socket it cut would end without a close frame.
    let dp = data_plane(&gw, dir.path(), "dp-idle", |config| {
        config.limits.header_read_timeout = Duration::from_millis(200);
        config.limits.keepalive_timeout = Duration::from_millis(200);
        config.sockets.idle_timeout = Duration::from_millis(1500);
    })
    .await;
    let mut socket = connect(dp.addr, "/v1/responses", &gw.key).await;
    send(&mut socket, response_create()).await;
    let completed = until(&mut socket, "response.completed").await;
    assert_eq!(completed["response"]["status"], "completed", "{completed}");

    let (events, close) = to_close(&mut socket).await;
    assert!(events.is_empty(), "an idle close sends no event: {events:?}");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
    assert!(close.reason.as_str().contains("idle"), "{close:?}");
    assert_eq!(gw.wait_for_usage(1).await[0]["status"], 200, "the response before the idle spell is billed");
    dp.shutdown().await;
}

#[tokio::test]
async fn a_responses_socket_past_its_lifetime_gets_the_limit_error_and_its_running_response_is_billed_what_it_used() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &["--type", "anthropic"]).await;
    // 80 words, one every 100 ms: still streaming when the lifetime ends.
    let words = (0..80).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    upstream.set_script(Script { reply: words, chunk_delay: Duration::from_millis(100), ..Script::default() });
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let dp = data_plane(&gw, dir.path(), "dp-lifetime", |config| {
        config.sockets.max_lifetime = Duration::from_secs(3);
    })
    .await;
    let mut socket = connect(dp.addr, "/v1/responses", &gw.key).await;
    send(&mut socket, response_create()).await;
    until(&mut socket, "response.output_text.delta").await;

    let (events, close) = to_close(&mut socket).await;
    let error = events.iter().find(|e| e["type"] == "error").unwrap_or_else(|| panic!("no error event: {events:?}"));
    assert_eq!(error["status"], 400, "{error}");
    assert_eq!(error["error"]["code"], "websocket_connection_limit_reached", "{error}");
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("(3 seconds)")), "{error}");
    assert!(events.iter().all(|e| e["type"] != "response.completed"), "the response was cut: {events:?}");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
    assert!(close.reason.as_str().contains("maximum lifetime"), "{close:?}");

    eventually("the upstream stream to be abandoned", Duration::from_secs(10), || async {
        (upstream.abandoned_streams() == 1).then_some(())
    })
    .await;
    let records = gw.wait_for_usage(1).await;
    let record = &records[0];
    assert_eq!(record["status"], 499, "ended as a client that leaves: {record}");
    let billed = record["completion_tokens"].as_i64().unwrap_or_default();
    assert!((1..80).contains(&billed), "billed {billed} tokens of 80 words: {record}");
    let cost = record["cost_micros"].as_i64().unwrap_or_default();
    assert!(cost > 0, "{record}");
    eventually("the balance to drop by what was billed", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - cost).then_some(())
    })
    .await;
    dp.shutdown().await;
}

#[tokio::test]
async fn a_realtime_session_past_its_lifetime_gets_session_expired_and_its_responses_stay_billed() {
    let mock = MockRealtime::start().await.expect("mock realtime");
    let gw = Gateway::start(1).await;
    let mut admin = gw.admin();
    admin.create_model(realtime_model()).await.expect("model create");
    admin.create_channel(realtime_channel(&mock)).await.expect("channel create");
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let dp = data_plane(&gw, dir.path(), "dp-realtime-lifetime", |config| {
        config.sockets.max_lifetime = Duration::from_secs(4);
    })
    .await;
    let mut socket = connect(dp.addr, &format!("/v1/realtime?model={REALTIME_MODEL}"), &gw.key).await;
    until(&mut socket, "session.created").await;
    send(&mut socket, json!({ "type": "response.create" })).await;
    let done = until(&mut socket, "response.done").await;
    assert_eq!(done["response"]["status"], "completed", "{done}");
    // The second response is held open upstream when the session expires.
    mock.hold(true);
    send(&mut socket, json!({ "type": "response.create" })).await;
    until(&mut socket, "response.output_audio.delta").await;

    let error = until(&mut socket, "error").await;
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert_eq!(error["error"]["code"], "session_expired", "{error}");
    assert_eq!(error["error"]["message"], "Your session hit the maximum duration of 4 seconds.", "{error}");
    assert!(error["event_id"].as_str().is_some_and(|id| !id.is_empty()), "{error}");
    let (events, close) = to_close(&mut socket).await;
    let cancelled = events.iter().find(|e| e["type"] == "response.done");
    assert!(cancelled.is_some(), "the cancelled response's end is relayed: {events:?}");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");

    assert_eq!(mock.cancels(), [Some("resp_2".to_owned())], "the open response was cancelled upstream");
    let mut records = gw.wait_for_usage(2).await;
    records.sort_by_key(|r| r["request_id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(records[0]["status"], 200, "{records:?}");
    assert_eq!(records[0]["cost_micros"], REALTIME_RESPONSE_COST, "{records:?}");
    assert_eq!(records[1]["status"], 499, "{records:?}");
    assert_eq!(records[1]["cost_micros"], REALTIME_PARTIAL_COST, "{records:?}");
    assert_eq!(records[1]["prompt_tokens"], PARTIAL.input, "{records:?}");
    eventually("the balance to drop by both responses", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - REALTIME_RESPONSE_COST - REALTIME_PARTIAL_COST).then_some(())
    })
    .await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (mock.open_sessions() == 0).then_some(())
    })
    .await;
    dp.shutdown().await;
}

#[tokio::test]
async fn an_open_socket_holds_a_connection_slot_until_it_closes() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let dp = data_plane(&gw, dir.path(), "dp-one-connection", |config| {
        config.limits.max_connections = 1;
    })
    .await;
    let mut socket = connect(dp.addr, "/v1/responses", &gw.key).await;
    eventually("the socket to be counted as a connection", Duration::from_secs(10), || async {
        (connections_open(&dp).await == 1).then_some(())
    })
    .await;

    // One more connection waits in the backlog while the socket is open:
    // a whole response on the socket comes and goes, and it is not served.
    let url = format!("http://{}/healthz", dp.addr);
    let waiting = tokio::spawn(async move {
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
        client.get(url).send().await.map(|answer| answer.status().as_u16())
    });
    send(&mut socket, response_create()).await;
    until(&mut socket, "response.completed").await;
    assert!(!waiting.is_finished(), "a connection was served past max_connections while the socket held its slot");
    assert_eq!(connections_open(&dp).await, 1);

    socket.close(None).await.expect("close");
    while let Some(Ok(_)) = socket.next().await {}
    let answered = tokio::time::timeout(Duration::from_secs(15), waiting).await;
    let status = answered.expect("served once the socket closed").expect("the request task").expect("an answer");
    assert_eq!(status, 200);
    eventually("the slots to be given back", Duration::from_secs(10), || async {
        (connections_open(&dp).await == 0).then_some(())
    })
    .await;
    dp.shutdown().await;
}

#[tokio::test]
async fn a_stopping_data_plane_lets_a_running_socket_response_finish_bills_it_and_closes_going_away() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = Gateway::start(1).await;
    // A translated channel streams the scripted reply.
    gw.channel("main", &upstream.base_url(), 0, &["--type", "anthropic"]).await;
    // 30 words, one every 100 ms: still streaming when the shutdown starts.
    let words = (0..30).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    upstream.set_script(Script { reply: words, chunk_delay: Duration::from_millis(100), ..Script::default() });
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let dp = data_plane(&gw, dir.path(), "dp-stop-responses", |_| {}).await;
    let mut socket = connect(dp.addr, "/v1/responses", &gw.key).await;
    send(&mut socket, response_create()).await;
    until(&mut socket, "response.output_text.delta").await;

    let stopping = tokio::spawn(dp.shutdown());
    // Sent while the response runs: a stopping socket starts no other.
    send(&mut socket, response_create()).await;
    let (events, close) = to_close(&mut socket).await;
    let completed = events.iter().filter(|e| e["type"] == "response.completed").collect::<Vec<_>>();
    assert_eq!(completed.len(), 1, "the running response finished, no other started: {events:?}");
    assert_eq!(completed[0]["response"]["status"], "completed", "{events:?}");
    assert!(events.iter().all(|e| e["type"] != "response.created" && e["type"] != "error"), "{events:?}");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert!(close.reason.as_str().contains("shutting down"), "{close:?}");
    tokio::time::timeout(Duration::from_secs(20), stopping).await.expect("the shutdown ends").expect("shutdown");

    let records = gw.wait_for_usage(1).await;
    let record = &records[0];
    assert_eq!(record["status"], 200, "{record}");
    assert_eq!(upstream.requests().len(), 1, "one response reached the upstream");
    let cost = record["cost_micros"].as_i64().unwrap_or_default();
    assert!(cost > 0, "{record}");
    eventually("the balance to drop by the response", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - cost).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_stopping_data_plane_cancels_and_bills_an_open_realtime_response_and_closes_the_session_going_away() {
    let mock = MockRealtime::start().await.expect("mock realtime");
    let gw = Gateway::start(1).await;
    let mut admin = gw.admin();
    admin.create_model(realtime_model()).await.expect("model create");
    admin.create_channel(realtime_channel(&mock)).await.expect("channel create");
    gw.synced().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let dp = data_plane(&gw, dir.path(), "dp-stop-realtime", |_| {}).await;
    let mut socket = connect(dp.addr, &format!("/v1/realtime?model={REALTIME_MODEL}"), &gw.key).await;
    until(&mut socket, "session.created").await;
    // The response is held open upstream when the data plane stops.
    mock.hold(true);
    send(&mut socket, json!({ "type": "response.create" })).await;
    until(&mut socket, "response.output_audio.delta").await;

    let stopping = tokio::spawn(dp.shutdown());
    let error = until(&mut socket, "error").await;
    assert_eq!(error["error"]["type"], "server_error", "{error}");
    assert_eq!(error["error"]["code"], "server_shutting_down", "{error}");
    assert!(error["event_id"].as_str().is_some_and(|id| !id.is_empty()), "{error}");
    let (events, close) = to_close(&mut socket).await;
    let cancelled = events.iter().find(|e| e["type"] == "response.done");
    assert!(cancelled.is_some(), "the cancelled response's end is relayed: {events:?}");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    tokio::time::timeout(Duration::from_secs(20), stopping).await.expect("the shutdown ends").expect("shutdown");

    assert_eq!(mock.cancels(), [Some("resp_1".to_owned())], "the open response was cancelled upstream");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["status"], 499, "{records:?}");
    assert_eq!(records[0]["cost_micros"], REALTIME_PARTIAL_COST, "{records:?}");
    assert_eq!(records[0]["prompt_tokens"], PARTIAL.input, "{records:?}");
    eventually("the balance to drop by the cancelled response", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - REALTIME_PARTIAL_COST).then_some(())
    })
    .await;
    eventually("the upstream session to close", Duration::from_secs(10), || async {
        (mock.open_sessions() == 0).then_some(())
    })
    .await;
}

/// `gpt-realtime` at the realtime suite's prices.
fn realtime_model() -> pb::Model {
    pb::Model {
        id: REALTIME_MODEL.into(),
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

fn realtime_channel(mock: &MockRealtime) -> pb::Channel {
    pb::Channel {
        name: "realtime".into(),
        r#type: "openai".into(),
        base_url: mock.base_url(),
        api_key: support::UPSTREAM_KEY.into(),
        has_key: true,
        models: vec![REALTIME_MODEL.into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    }
}
