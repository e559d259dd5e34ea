//! `/v1/responses` over a WebSocket: the official OpenAI Python SDK's
//! `responses.connect()` (`tests/sdk/openai_responses_ws.py`) runs several
//! responses on one socket through a real data plane to the mock upstream,
//! each billed once like its HTTP twin; a continuation by
//! `previous_response_id` reaches the channel as the whole conversation; a
//! refusal after the upgrade is an `error` event and the socket goes on; an
//! `anthropic` channel serves the socket by translation. Before the upgrade
//! the refusals are HTTP answers: a bad key 401, the mode turned off 426.
//! Codex 0.94, configured for WebSockets, answers a turn over the socket,
//! and falls back to HTTP where the mode is off.

use crate::support;

use std::{path::PathBuf, time::Duration};

use gw_proto::pb;
use gw_tests::{
    cli::{self, AGENTS_BIN},
    harness::{self, eventually},
    mock::{
        endpoints::{self, MockEndpoints},
        upstream::{MockUpstream, Recorded, Script},
    },
};
use serde_json::Value;
use support::{Gateway, MODEL};

const START_BALANCE: i64 = 100_000_000;
/// What the mock answers on the messages API.
const MESSAGES_REPLY: &str = "Hello from the mock upstream over a socket";

/// A gateway with one channel of `kind` on `upstream` serving `gpt-4o`.
async fn gateway(upstream: &MockUpstream, kind: &str) -> Gateway {
    let gw = Gateway::start(1).await;
    gw.channel("main", &upstream.base_url(), 0, &["--type", kind]).await;
    upstream.set_script(Script { reply: MESSAGES_REPLY.into(), ..Script::default() });
    gw.synced().await;
    gw
}

/// Runs the SDK script against data plane `addr` with `args`.
async fn run_sdk(addr: std::net::SocketAddr, key: &str, args: &[&str]) -> Value {
    let base_url = format!("http://{addr}/v1");
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", key), ("GW_MODEL", MODEL)];
    harness::sdk("openai_responses_ws.py", args, &env).await
}

/// A WebSocket handshake for `/v1/responses` on `addr` with `key`, sent
/// as plain HTTP: the answer when the gateway does not upgrade.
async fn handshake(addr: std::net::SocketAddr, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("http://{addr}/v1/responses"))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("the handshake")
}

/// Waits for `n` usage records of the test token, checks each is one
/// `/v1/responses` call with `tokens`, and that the balance dropped by
/// exactly their cost. Returns the records.
async fn assert_billed(gw: &Gateway, n: usize, tokens: (i64, i64)) -> Vec<Value> {
    let records = gw.wait_for_usage(n).await;
    let mut cost = 0;
    for record in &records {
        assert_eq!(record["endpoint"], "/v1/responses", "{record}");
        assert_eq!(record["model"], MODEL, "{record}");
        assert!(!record["estimated"].as_bool().unwrap_or(false), "{record}");
        let counted = (record["prompt_tokens"].as_i64(), record["completion_tokens"].as_i64());
        assert_eq!(counted, (Some(tokens.0), Some(tokens.1)), "{record}");
        let micros = record["cost_micros"].as_i64().unwrap_or_default();
        assert!(micros > 0, "{record}");
        cost += micros;
    }
    eventually("the balance to drop by what was billed", Duration::from_secs(15), || async {
        (gw.balance().await == START_BALANCE - cost).then_some(())
    })
    .await;
    records
}

/// What the data plane with the admin listener `admin` counts of
/// `/v1/responses` answers with `status` (an upgrade is answered 101).
async fn responses_answered(admin: Option<std::net::SocketAddr>, status: u16) -> u64 {
    let admin = admin.expect("the data plane's admin listener");
    let text = reqwest::get(format!("http://{admin}/metrics")).await.expect("/metrics").text().await.expect("body");
    text.lines()
        .filter(|line| line.starts_with("gw_requests_total"))
        .filter(|line| line.contains(r#"http_route="/v1/responses""#))
        .filter(|line| line.contains(&format!(r#"http_response_status_code="{status}""#)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn responses_requests(upstream: &MockUpstream) -> Vec<endpoints::Received> {
    MockEndpoints::of(upstream).received().into_iter().filter(|r| r.path == "/v1/responses").collect()
}

fn messages_requests(upstream: &MockUpstream) -> Vec<Recorded> {
    upstream.requests().into_iter().filter(|r| r.path == "/v1/messages").collect()
}

/// A data plane of `gw`'s cluster with responses over a WebSocket turned
/// off, once it serves the test token.
async fn data_plane_without_websockets(gw: &Gateway, dir: &std::path::Path) -> gw_data_plane::Handle {
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let cluster = &gw.cluster;
    let mut config = gw_data_plane::Config::new(listen, cluster.control_plane_url(), dir, cluster.node_key.clone());
    config.node_id = Some("dp-no-websockets".into());
    config.responses_websocket = false;
    config.admin_listen = Some(listen);
    let handle = gw_data_plane::start(config).await.expect("the data plane without websockets");
    let url = format!("http://{}/v1/models", handle.addr);
    eventually("the data plane to serve the token", Duration::from_secs(15), || async {
        let answer = reqwest::Client::new().get(&url).bearer_auth(&gw.key).send().await.ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
    handle
}

#[tokio::test]
async fn the_sdk_runs_several_responses_on_one_socket_each_billed_once() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let result = run_sdk(gw.cluster.data_planes[0].addr, &gw.key, &[]).await;

    for name in ["first", "second", "after"] {
        let response = &result[name];
        assert_eq!(response["status"], "completed", "{name}: {result}");
        assert_eq!(response["text"], endpoints::REPLY, "{name}: {result}");
        assert_eq!(response["events"][0], "response.created", "{name}: {result}");
        let usage = (&response["usage"]["input_tokens"], &response["usage"]["output_tokens"]);
        assert_eq!(usage, (&endpoints::RESPONSE_INPUT_TOKENS.into(), &endpoints::RESPONSE_OUTPUT_TOKENS.into()));
    }
    assert_ne!(result["first"]["id"], result["second"]["id"], "{result}");

    // The unknown model: an error event in OpenAI's shape, with the catalogue's text.
    let error = &result["unknown"]["error"];
    assert_eq!(error["status"], 404, "{result}");
    assert_eq!(error["code"], "model_not_found", "{result}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("模型不存在: no-such-model (request id: "), "{result}");
    assert_eq!(error["headers"]["x-should-retry"], "false", "{result}");

    // Each response is one stream request upstream; the continuation
    // carries the conversation instead of an id the upstream never stored.
    let sent = responses_requests(&upstream);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(sent.iter().all(|r| r.json["stream"] == true && r.json.get("type").is_none()), "{sent:?}");
    let second = &sent[1].json;
    assert!(second.get("previous_response_id").is_none(), "{second}");
    let roles: Vec<&str> =
        second["input"].as_array().expect("input").iter().filter_map(|i| i["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{second}");
    assert_eq!(second["input"][1]["content"][0]["text"], endpoints::REPLY, "{second}");
    assert!(sent[2].json.get("stream_id").is_none(), "the lane stays on the socket: {}", sent[2].json);
    assert_eq!(result["after"]["lanes"], serde_json::json!(["lane-7"]), "every event of the lane names it: {result}");
    assert_eq!(result["first"]["lanes"], serde_json::json!([""]), "{result}");

    let tokens = (endpoints::RESPONSE_INPUT_TOKENS, endpoints::RESPONSE_OUTPUT_TOKENS);
    let records = assert_billed(&gw, 3, tokens).await;
    let mut ids: Vec<&str> = records.iter().filter_map(|r| r["request_id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "one record per response: {records:?}");
    assert!(
        responses_answered(gw.cluster.data_planes[0].admin_addr, 101).await >= 1,
        "the gateway upgraded /v1/responses"
    );
}

#[tokio::test]
async fn an_anthropic_channel_serves_the_socket_by_translation() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let result = run_sdk(gw.cluster.data_planes[0].addr, &gw.key, &[]).await;

    for name in ["first", "second", "after"] {
        assert_eq!(result[name]["status"], "completed", "{name}: {result}");
        assert_eq!(result[name]["text"], MESSAGES_REPLY, "{name}: {result}");
    }
    assert_eq!(result["unknown"]["error"]["status"], 404, "{result}");
    let sent = messages_requests(&upstream);
    assert_eq!(sent.len(), 3, "{sent:?}");
    // `previous_response_id` cannot be translated; the socket sent the
    // conversation it names instead.
    let roles: Vec<&str> =
        sent[1].body["messages"].as_array().expect("messages").iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{}", sent[1].body);
    assert!(sent[1].body.to_string().contains(MESSAGES_REPLY), "{}", sent[1].body);
    assert_billed(&gw, 3, (11, 7)).await;
}

#[tokio::test]
async fn a_client_that_leaves_after_asking_is_billed_once() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let result = run_sdk(gw.cluster.data_planes[0].addr, &gw.key, &["leave"]).await;
    assert_eq!(result["left"], true, "{result}");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["endpoint"], "/v1/responses", "{records:?}");
    eventually("the upstream to have been asked once", Duration::from_secs(10), || async {
        (responses_requests(&upstream).len() == 1).then_some(())
    })
    .await;
    assert_eq!(gw.usage().await.len(), 1, "billed once");
}

#[tokio::test]
async fn a_client_that_closes_mid_response_pays_for_what_it_got() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "anthropic").await;
    let words = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    upstream.set_script(Script { reply: words, chunk_delay: Duration::from_millis(100), ..Script::default() });
    let result = run_sdk(gw.cluster.data_planes[0].addr, &gw.key, &["cut"]).await;
    assert_eq!(result["deltas"], 2, "{result}");

    eventually("the upstream stream to be abandoned", Duration::from_secs(10), || async {
        (upstream.abandoned_streams() == 1).then_some(())
    })
    .await;
    let records = gw.wait_for_usage(1).await;
    let record = &records[0];
    assert_eq!(record["status"], 499, "{record}");
    assert_eq!(record["endpoint"], "/v1/responses", "{record}");
    assert_eq!(record["prompt_tokens"], 11, "{record}");
    // What the stream reported before the client left, as for a client
    // that drops the HTTP stream; never the whole answer.
    let billed = record["completion_tokens"].as_i64().unwrap_or_default();
    assert!((1..40).contains(&billed), "billed {billed} tokens of 40 words: {record}");
    assert!(record["cost_micros"].as_i64().unwrap_or_default() > 0, "{record}");
}

#[tokio::test]
async fn a_token_revoked_mid_socket_is_refused_on_its_next_response() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (asked, revoked) = (dir.path().join("asked"), dir.path().join("revoked"));
    let (addr, key) = (gw.cluster.data_planes[0].addr, gw.key.clone());
    let args = [asked.display().to_string(), revoked.display().to_string()];
    let script = tokio::spawn(async move { run_sdk(addr, &key, &["revoke", &args[0], &args[1]]).await });
    eventually("the first response on the socket", Duration::from_secs(60), || async { asked.exists().then_some(()) })
        .await;
    let disable =
        pb::UpdateTokenRequest { id: gw.token.clone(), status: Some("disabled".into()), ..Default::default() };
    gw.admin().update_token(disable).await.expect("token disable");
    gw.synced().await;
    std::fs::write(&revoked, "").expect("the signal to go on");
    let result = script.await.expect("the SDK script");

    assert_eq!(result["first"]["status"], "completed", "{result}");
    let error = &result["second"]["error"];
    assert_eq!(error["status"], 401, "{result}");
    assert!(error["message"].as_str().unwrap_or_default().starts_with("无效的令牌"), "{result}");
    assert_eq!(result["closed"]["code"], 1008, "the socket is closed after a refused token: {result}");
    assert_eq!(responses_requests(&upstream).len(), 1, "the second response never reached the channel");
    assert_eq!(gw.wait_for_usage(1).await.len(), 1);
}

#[tokio::test]
async fn refusals_before_the_upgrade_are_http_answers() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let addr = gw.cluster.data_planes[0].addr;

    let refused = handshake(addr, Some("sk-not-a-key")).await;
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().contains_key("x-request-id"));
    let body: Value = refused.json().await.expect("JSON");
    assert!(body["error"]["message"].as_str().unwrap_or_default().starts_with("无效的令牌"), "{body}");
    let missing = handshake(addr, None).await;
    assert_eq!(missing.status(), 401);
    let body: Value = missing.json().await.expect("JSON");
    assert!(body["error"]["message"].as_str().unwrap_or_default().starts_with("未提供令牌"), "{body}");

    // A plain GET is no handshake: the path takes none.
    let plain = reqwest::Client::new().get(format!("http://{addr}/v1/responses")).bearer_auth(&gw.key).send().await;
    let plain = plain.expect("the GET");
    assert_eq!(plain.status(), 404);
    let body: Value = plain.json().await.expect("JSON");
    assert_eq!(body["error"]["message"], "Invalid URL (GET /v1/responses)");
    assert!(upstream.requests().is_empty(), "nothing reached the channel");
}

#[tokio::test]
async fn with_the_mode_off_the_upgrade_is_refused_with_426_and_http_still_serves() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let off = data_plane_without_websockets(&gw, dir.path()).await;

    let refused = handshake(off.addr, Some(&gw.key)).await;
    assert_eq!(refused.status(), 426);
    assert_eq!(refused.headers().get("x-should-retry").map(|v| v.to_str().unwrap_or_default()), Some("false"));
    let body: Value = refused.json().await.expect("JSON");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("POST /v1/responses"), "{body}");
    // HTTP is served there as ever.
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("http://{}/v1/responses", off.addr))
        .bearer_auth(&gw.key)
        .json(&serde_json::json!({"model": MODEL, "input": "hi"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(answer.status(), 200);
    off.shutdown().await;
}

// === Codex ===

/// `codex exec <prompt>` with a model provider `gw` at `addr`'s `/v1`
/// that takes WebSockets (`supports_websockets`, with the
/// `responses_websockets` feature on, as Codex 0.94 needs both).
async fn codex_over_websockets(addr: std::net::SocketAddr, key: &str, prompt: &str) -> cli::Run {
    let (home, work) = cli::home();
    let env = [
        ("HOME", home.path().display().to_string()),
        ("CODEX_HOME", home.path().display().to_string()),
        ("GW_API_KEY", key.to_owned()),
        ("RUST_LOG", "warn".to_owned()),
    ];
    let provider = format!(
        r#"model_providers.gw={{name="gateway",base_url="http://{addr}/v1",env_key="GW_API_KEY",wire_api="responses",supports_websockets=true,request_max_retries=0,stream_max_retries=0}}"#
    );
    let args = [
        "exec",
        "--skip-git-repo-check",
        "--color",
        "never",
        "-m",
        MODEL,
        "-c",
        "model_provider=gw",
        "-c",
        "features.responses_websockets=true",
        "-c",
        &provider,
        prompt,
    ];
    cli::run(&PathBuf::from(AGENTS_BIN).join("codex"), &args, &work, &env).await
}

fn assert_codex_answered(run: &cli::Run) {
    assert!(
        run.status == Some(0) && run.stdout.contains(endpoints::REPLY),
        "codex did not answer (exit {:?})\n--- stdout\n{}\n--- stderr\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}

#[tokio::test]
async fn codex_answers_a_turn_over_the_socket_and_is_billed() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let run = codex_over_websockets(gw.cluster.data_planes[0].addr, &gw.key, "Count the pebbles.").await;
    assert_codex_answered(&run);
    assert_eq!(
        responses_answered(gw.cluster.data_planes[0].admin_addr, 101).await,
        1,
        "codex upgraded /v1/responses once"
    );
    let sent = responses_requests(&upstream);
    assert!(!sent.is_empty() && sent.iter().all(|r| r.json["stream"] == true), "{sent:?}");
    assert!(sent[0].json["instructions"].is_string(), "codex's own request reached the channel: {}", sent[0].json);
    assert_billed(&gw, sent.len(), (endpoints::RESPONSE_INPUT_TOKENS, endpoints::RESPONSE_OUTPUT_TOKENS)).await;
}

#[tokio::test]
async fn codex_falls_back_to_http_where_the_mode_is_off() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let gw = gateway(&upstream, "openai").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let off = data_plane_without_websockets(&gw, dir.path()).await;
    let run = codex_over_websockets(off.addr, &gw.key, "Count the pebbles.").await;
    assert_codex_answered(&run);
    assert!(responses_answered(off.admin_addr, 426).await >= 1, "codex asked for the socket first");
    assert!(!responses_requests(&upstream).is_empty(), "the turn went over HTTP");
    off.shutdown().await;
}
