//! End-to-end scenarios of the foundation: real Redis, the real control plane
//! and two data planes (in-process; as processes for the restart scenarios),
//! the in-process admin client, a mock upstream.

use std::time::{Duration, Instant};

use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster, Mode, eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};

/// gpt-4o at $2.5 / $10 per 1M tokens, group `vip` at ratio 2, and the mock's
/// default usage of 11 prompt + 7 completion tokens:
/// ceil((11 × 2.5 + 7 × 10) × 2) = 195 µ$ per request.
const COST: i64 = 195;
const UPSTREAM_KEY: &str = "sk-upstream-secret-0123456789";

struct Fixture {
    cluster: Cluster,
    upstream: MockUpstream,
    account: String,
    token: String,
    key: String,
    _redis: RedisServer,
}

/// A cluster on Redis with one upstream, one account ($100) and one token in
/// group `vip`, served by every data plane; in-process.
async fn setup() -> Fixture {
    setup_in(Mode::InProcess).await
}

/// `setup`, with the control plane and data planes run in `mode`.
async fn setup_in(mode: Mode) -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start_with(mode, &redis.url(), 2, |_| {}).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model create");
    admin.create_group(pb::Group { name: "vip".into(), ratio: 2.0, ..Default::default() }).await.expect("group create");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: UPSTREAM_KEY.into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        model_map: [("gpt-4o".to_owned(), "gpt-4o-2024-08-06".to_owned())].into(),
        groups: vec!["default".into(), "vip".into()],
        weight: 1,
        ..Default::default()
    };
    let channel = admin.create_channel(channel).await.expect("channel create").into_inner();
    assert!(!format!("{channel:?}").contains(UPSTREAM_KEY), "channel create answered the upstream key: {channel:?}");
    let account = customer(&cluster, "acme", 100_000_000).await;
    let (token, key) = create_token(&cluster, quota(&account, 5_000_000)).await;
    let fixture = Fixture { cluster, upstream, account, token, key, _redis: redis };
    for i in 0..2 {
        fixture.cluster.wait_until_served(i, &fixture.key).await;
    }
    fixture
}

/// A new account with `balance_micros` in `default` and `vip`; its id.
async fn customer(cluster: &Cluster, name: &str, balance_micros: i64) -> String {
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros,
        groups: vec!["default".into(), "vip".into()],
        ..Default::default()
    };
    cluster.admin().create_account(request).await.expect("account create").into_inner().id
}

/// A token of `account` in `vip` bounded only by its account.
fn vip_token(account: &str) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest { account_id: account.into(), group: "vip".into(), unlimited: true, ..Default::default() }
}

/// A token of `account` in `vip` with a quota of `micros`.
fn quota(account: &str, micros: i64) -> pb::CreateTokenRequest {
    pb::CreateTokenRequest { unlimited: false, quota_micros: micros, ..vip_token(account) }
}

async fn create_token(cluster: &Cluster, request: pb::CreateTokenRequest) -> (String, String) {
    let created = cluster.admin().create_token(request).await.expect("token create").into_inner();
    let key = created.key;
    assert!(key.starts_with("sk-") && key.len() >= 43, "bad key {key:?}");
    (created.token.unwrap_or_default().id, key)
}

async fn usage(f: &Fixture) -> Vec<pb::UsageRecord> {
    let request = pb::ListUsageRequest { token_id: f.token.clone(), limit: 100, ..Default::default() };
    f.cluster.admin().list_usage(request).await.expect("usage list").into_inner().items
}

/// POSTs a chat request to data plane `i`; returns status, request id and body text.
async fn chat(f: &Fixture, i: usize, key: &str, stream: bool) -> (u16, String, String) {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": stream});
    let response = f
        .cluster
        .http()
        .post(format!("{}/chat/completions", f.cluster.base_url(i)))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("chat request");
    let status = response.status().as_u16();
    let id = response.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    (status, id, response.text().await.expect("chat body"))
}

async fn account_balance(f: &Fixture) -> i64 {
    let request = pb::GetRequest { id: f.account.clone() };
    f.cluster.admin().get_account(request).await.expect("account get").into_inner().balance_micros
}

async fn token_used(f: &Fixture) -> i64 {
    let request = pb::GetRequest { id: f.token.clone() };
    f.cluster.admin().get_token(request).await.expect("token get").into_inner().used_micros
}

async fn set_token_status(f: &Fixture, status: &str) {
    let request = pb::UpdateTokenRequest { id: f.token.clone(), status: Some(status.into()), ..Default::default() };
    f.cluster.admin().update_token(request).await.unwrap_or_else(|e| panic!("token {status}: {e}"));
}

/// Waits until the ledger shows exactly `requests` charged requests.
async fn wait_for_charges(f: &Fixture, requests: i64) {
    let expected = (100_000_000 - requests * COST, requests * COST);
    let seen = eventually("usage to be applied", Duration::from_secs(15), || async {
        let now = (account_balance(f).await, token_used(f).await);
        (now == expected).then_some(now)
    })
    .await;
    assert_eq!(seen, expected);
}

/// Text of every content delta of an SSE chat stream.
fn streamed_text(body: &str) -> String {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn chat_and_stream_through_two_data_planes_are_billed_exactly() {
    let f = setup().await;

    let (status, _, body) = chat(&f, 0, &f.key, false).await;
    assert_eq!(status, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).expect("JSON reply");
    assert_eq!(reply["choices"][0]["message"]["content"], Script::default().reply);

    let (status, _, body) = chat(&f, 1, &f.key, true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(streamed_text(&body), Script::default().reply);
    assert!(body.trim_end().ends_with("data: [DONE]"), "stream did not end with [DONE]: {body}");
    assert!(!body.contains("\"usage\":{"), "the usage chunk the client did not ask for leaked: {body}");

    wait_for_charges(&f, 2).await;

    let sent = f.upstream.requests();
    assert_eq!(sent.len(), 2);
    for request in &sent {
        assert_eq!(request.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
        assert_eq!(request.body["model"], "gpt-4o-2024-08-06", "model map not applied");
    }
    assert_eq!(sent[1].body["stream_options"]["include_usage"], true, "stream did not ask the upstream for usage");

    let records = usage(&f).await;
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(record.cost_micros, COST);
        assert_eq!(record.prompt_tokens, 11);
        assert_eq!(record.completion_tokens, 7);
    }
}

#[tokio::test]
async fn a_stream_that_asked_for_usage_keeps_its_usage_chunk() {
    let f = setup().await;
    let body = json!({
        "model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}],
    });
    let response = f
        .cluster
        .http()
        .post(format!("{}/chat/completions", f.cluster.base_url(0)))
        .bearer_auth(&f.key)
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("body");
    assert!(text.contains("\"prompt_tokens\":11"), "usage chunk missing: {text}");
    wait_for_charges(&f, 1).await;
}

#[tokio::test]
async fn disabled_token_is_refused_by_every_data_plane_within_a_second() {
    let f = setup().await;
    assert_eq!(chat(&f, 0, &f.key, false).await.0, 200);

    set_token_status(&f, "disabled").await;
    let disabled_at = Instant::now();
    for i in 0..2 {
        eventually(&format!("data plane {i} to refuse the disabled token"), Duration::from_secs(1), || async {
            (chat(&f, i, &f.key, false).await.0 == 401).then_some(())
        })
        .await;
    }
    let elapsed = disabled_at.elapsed();
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");

    set_token_status(&f, "enabled").await;
    for i in 0..2 {
        eventually("the token to work again", Duration::from_secs(2), || async {
            (chat(&f, i, &f.key, false).await.0 == 200).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn data_planes_serve_without_the_control_plane_and_usage_lands_once() {
    let mut f = setup_in(Mode::Processes).await;
    assert_eq!(chat(&f, 0, &f.key, false).await.0, 200);
    wait_for_charges(&f, 1).await;

    let mut answered = Vec::new();
    for i in 0..2 {
        answered.push(chat_answers_counted(&f, i).await);
    }
    f.cluster.stop_control_plane().await;
    for i in 0..2 {
        for stream in [false, true] {
            let (status, _, body) = chat(&f, i, &f.key, stream).await;
            assert_eq!(status, 200, "data plane {i} stopped serving without the control plane: {body}");
        }
    }
    // Each data plane process counted exactly its two answers on /metrics.
    for (i, before) in answered.into_iter().enumerate() {
        eventually("each data plane's /metrics to count its two answers", Duration::from_secs(10), || async {
            (chat_answers_counted(&f, i).await == before + 2).then_some(())
        })
        .await;
    }
    f.cluster.start_control_plane().await.expect("restart control plane");

    wait_for_charges(&f, 5).await;
    // Settled: once no data plane holds an unacknowledged batch, no
    // duplicate report can still arrive; then check again.
    eventually("every spooled usage batch to be acknowledged", Duration::from_secs(15), || async {
        (0..2).all(|i| f.cluster.pending_usage_batches(i) == 0).then_some(())
    })
    .await;
    assert_eq!(token_used(&f).await, 5 * COST);
    let records = usage(&f).await;
    assert_eq!(records.len(), 5, "{records:?}");
}

#[tokio::test]
async fn restarted_data_plane_serves_from_its_disk_snapshot() {
    let mut f = setup_in(Mode::Processes).await;
    f.cluster.stop_control_plane().await;
    f.cluster.stop_data_plane(0).await;
    f.cluster.start_data_plane(0).await.expect("data plane restarts without the control plane");

    let (status, _, body) = chat(&f, 0, &f.key, false).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = chat(&f, 0, "sk-not-a-real-key-0000000000000000000000000", false).await;
    assert_eq!(status, 401);

    f.cluster.start_control_plane().await.expect("restart control plane");
    wait_for_charges(&f, 1).await;
}

/// The `gw_requests_total` of chat answered 200 that data plane `i` shows
/// on its admin listener's `/metrics`.
async fn chat_answers_counted(f: &Fixture, i: usize) -> u64 {
    let admin = f.cluster.data_planes[i].admin_addr.expect("the data plane's admin listener");
    let text = f.cluster.http().get(format!("http://{admin}/metrics")).send().await.expect("/metrics").text().await;
    let text = text.expect("/metrics body");
    text.lines()
        .filter(|line| {
            line.starts_with("gw_requests_total{")
                && line.contains(r#"http_response_status_code="200""#)
                && line.contains(r#"http_route="/v1/chat/completions""#)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Asserts an OpenAI-shaped error with an exact message (plus the request-id
/// suffix where the catalogue has one) and an optional code.
fn assert_error(status: u16, id: &str, body: &str, want_status: u16, message: &str, code: Option<&str>) {
    assert_eq!(status, want_status, "{body}");
    let body: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("error body is not JSON: {body}"));
    let error = &body["error"];
    let expected = if message.starts_with("Invalid URL") {
        message.to_owned()
    } else {
        assert!(!id.is_empty(), "no x-request-id");
        format!("{message} (request id: {id})")
    };
    assert_eq!(error["message"], expected.as_str(), "{body}");
    assert!(error.get("type").is_some() && error.get("param").is_some() && error.get("code").is_some(), "{body}");
    if let Some(code) = code {
        assert_eq!(error["code"], code, "{body}");
    }
}

async fn raw(f: &Fixture, method: &str, path: &str, auth: Option<&str>) -> (u16, String, String) {
    let url = format!("http://{}{path}", f.cluster.data_planes[0].addr);
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = f.cluster.http().request(method, url).json(&json!({"model": "gpt-4o", "messages": []}));
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let id = response.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(!id.is_empty(), "every response carries x-request-id");
    (status, id, response.text().await.expect("body"))
}

#[tokio::test]
async fn errors_carry_the_exact_catalogue_messages() {
    let f = setup().await;
    let bearer = format!("Bearer {}", f.key);
    let chat_path = "/v1/chat/completions";

    let (s, id, b) = raw(&f, "POST", chat_path, None).await;
    assert_error(s, &id, &b, 401, "未提供令牌", None);
    let (s, id, b) = raw(&f, "POST", chat_path, Some(&f.key)).await;
    assert_error(s, &id, &b, 401, "未提供令牌", None);
    let (s, id, b) = raw(&f, "POST", chat_path, Some(&format!("Basic {}", f.key))).await;
    assert_error(s, &id, &b, 401, "未提供令牌", None);
    let truncated = format!("Bearer {}", &f.key[..f.key.len() - 3]);
    let (s, id, b) = raw(&f, "POST", chat_path, Some(&truncated)).await;
    assert_error(s, &id, &b, 401, "无效的令牌", None);
    let (s, id, b) = raw(&f, "POST", chat_path, Some("Bearer sk-unknown")).await;
    assert_error(s, &id, &b, 401, "无效的令牌", None);

    // 2020-01-01T00:00:00Z
    let expires = pb::CreateTokenRequest { expires_at: 1_577_836_800, ..vip_token(&f.account) };
    let (_, expired) = create_token(&f.cluster, expires).await;
    wait_for_revision(&f).await;
    let (s, id, b) = raw(&f, "POST", chat_path, Some(&format!("Bearer {expired}"))).await;
    assert_error(s, &id, &b, 401, "无效的令牌", None);

    // Token quota: $0.0001 does not cover one request's reservation, so the
    // first is refused (the cap is never passed).
    let (_, small) = create_token(&f.cluster, quota(&f.account, 100)).await;
    f.cluster.wait_until_served(0, &small).await;
    let (s, id, b) = eventually("the token quota to run out", Duration::from_secs(10), || async {
        let answer = chat(&f, 0, &small, false).await;
        (answer.0 != 200).then_some(answer)
    })
    .await;
    assert_error(s, &id, &b, 403, "该令牌额度已用尽", None);

    // Account balance: $0.0001 left does not cover one request's reservation.
    let poor = pb::CreateAccountRequest {
        name: "poor".into(),
        balance_micros: 100,
        groups: vec!["vip".into()],
        ..Default::default()
    };
    let poor = f.cluster.admin().create_account(poor).await.expect("account create").into_inner().id;
    let (_, poor_key) = create_token(&f.cluster, vip_token(&poor)).await;
    f.cluster.wait_until_served(0, &poor_key).await;
    let (s, id, b) = eventually("the balance to run out", Duration::from_secs(10), || async {
        let answer = chat(&f, 0, &poor_key, false).await;
        (answer.0 != 200).then_some(answer)
    })
    .await;
    assert_error(s, &id, &b, 403, "用户额度不足, 剩余额度: ＄0.000100", Some("insufficient_user_quota"));

    for (method, path) in [
        ("POST", "/v1/v1/chat/completions"),
        ("POST", "/v1"),
        ("POST", "/chat/completions"),
        ("GET", "/v1/nothing-here"),
    ] {
        let (s, id, b) = raw(&f, method, path, Some(&bearer)).await;
        assert_error(s, &id, &b, 404, &format!("Invalid URL ({method} {path})"), None);
    }
}

/// Waits until the first data plane has acknowledged the newest revision.
async fn wait_for_revision(f: &Fixture) {
    eventually("data planes to ACK the newest revision", Duration::from_secs(5), || async {
        let planes = f.cluster.admin().list_data_planes(pb::ListRequest::default()).await.ok()?.into_inner();
        let current = |p: &pb::DataPlane| p.acked_revision >= planes.revision;
        (planes.items.len() == 2 && planes.items.iter().all(current)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn models_list_shows_what_the_token_may_use() {
    let f = setup().await;
    let response = f
        .cluster
        .http()
        .get(format!("{}/models", f.cluster.base_url(1)))
        .bearer_auth(&f.key)
        .send()
        .await
        .expect("models");
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.expect("JSON");
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"].as_array().expect("data").iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["gpt-4o"]);
}

#[tokio::test]
async fn the_openai_python_sdk_chats_and_streams() {
    let f = setup().await;
    let base_url = f.cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", &f.key), ("GW_MODEL", "gpt-4o")];
    let result = harness::sdk("openai_chat.py", &[], &env).await;
    assert_eq!(result["text"], Script::default().reply);
    assert_eq!(result["streamed"], Script::default().reply);
    assert_eq!(result["prompt_tokens"], 11);
    assert_eq!(result["retrieved"]["id"], "gpt-4o");
    assert_eq!(result["retrieved"]["object"], "model");
    assert_eq!(result["missing"], 404, "models.retrieve of an unknown model is the SDK's NotFoundError");
    wait_for_charges(&f, 2).await;
}

/// What a chat front-end shows for a key: its quota as the limit and, once
/// the control plane applied the usage, what it spent, from either data
/// plane and with or without `/v1`.
#[tokio::test]
async fn chat_front_ends_read_the_keys_limit_and_spending() {
    let f = setup().await;
    let (status, _, body) = chat(&f, 0, &f.key, false).await;
    assert_eq!(status, 200, "{body}");
    wait_for_charges(&f, 1).await;
    let get = |path: String| {
        let request = f.cluster.http().get(path).bearer_auth(&f.key);
        async move { request.send().await.expect("billing request").json::<Value>().await.expect("billing json") }
    };
    let root = f.cluster.base_url(1).trim_end_matches("/v1").to_owned();
    let subscription = get(format!("{root}/dashboard/billing/subscription")).await;
    assert_eq!(subscription["hard_limit_usd"], 5.0, "{subscription}");
    let cents = eventually("the data plane to see the spending", Duration::from_secs(15), || {
        let usage = get(format!("{}/dashboard/billing/usage", f.cluster.base_url(1)));
        async move {
            let cents = usage.await["total_usage"].as_f64().unwrap_or_default();
            (cents > 0.0).then_some(cents)
        }
    })
    .await;
    assert!((cents - COST as f64 / 10_000.0).abs() < 1e-9, "{cents} cents for {COST} micro-USD");
}
