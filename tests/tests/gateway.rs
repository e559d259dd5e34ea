//! End-to-end scenarios of the foundation: real Redis, the real control plane
//! and two data planes as processes, gwctl as a process, a mock upstream.

use std::time::{Duration, Instant};

use gw_tests::{
    harness::{Cluster, eventually},
    mock_upstream::{MockUpstream, Script},
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
/// group `vip`, served by every data plane.
async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    cluster
        .gwctl(&[
            "model",
            "create",
            "--id",
            "gpt-4o",
            "--category",
            "chat",
            "--input-price",
            "2.5",
            "--output-price",
            "10",
        ])
        .await
        .expect("model create");
    cluster.gwctl(&["group", "create", "--name", "vip", "--ratio", "2"]).await.expect("group create");
    let base_url = upstream.base_url();
    let channel = cluster
        .gwctl(&[
            "channel",
            "create",
            "--name",
            "main",
            "--type",
            "openai",
            "--base-url",
            &base_url,
            "--key",
            UPSTREAM_KEY,
            "--models",
            "gpt-4o",
            "--groups",
            "default,vip",
            "--map",
            "gpt-4o=gpt-4o-2024-08-06",
        ])
        .await
        .expect("channel create");
    assert!(!channel.to_string().contains(UPSTREAM_KEY), "channel create printed the upstream key: {channel}");
    let account = cluster
        .gwctl(&["account", "create", "--name", "acme", "--balance", "100", "--groups", "default,vip"])
        .await
        .expect("account create");
    let account = str_field(&account, "id");
    let (token, key) = create_token(&cluster, &account, &["--quota", "5"]).await;
    let fixture = Fixture { cluster, upstream, account, token, key, _redis: redis };
    for i in 0..2 {
        wait_until_served(&fixture, i, &fixture.key).await;
    }
    fixture
}

async fn create_token(cluster: &Cluster, account: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["token", "create", "--account", account, "--group", "vip"];
    args.extend_from_slice(extra);
    let created = cluster.gwctl(&args).await.expect("token create");
    let key = str_field(&created, "key");
    assert!(key.starts_with("sk-") && key.len() >= 43, "bad key {key:?}");
    let token = created.get("token").unwrap_or(&created);
    (str_field(token, "id"), key)
}

fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_else(|| panic!("no string {field:?} in {value}")).to_owned()
}

fn int_field(value: &Value, field: &str) -> i64 {
    value[field].as_i64().unwrap_or_else(|| panic!("no integer {field:?} in {value}"))
}

/// Waits until data plane `i` accepts `key` (its snapshot has the token).
async fn wait_until_served(f: &Fixture, i: usize, key: &str) {
    let url = format!("{}/models", f.cluster.base_url(i));
    eventually(&format!("data plane {i} to know the token"), Duration::from_secs(10), || async {
        let response = f.cluster.http().get(&url).bearer_auth(key).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
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
    int_field(&f.cluster.gwctl(&["account", "get", &f.account]).await.expect("account get"), "balance_micros")
}

async fn token_used(f: &Fixture) -> i64 {
    int_field(&f.cluster.gwctl(&["token", "get", &f.token]).await.expect("token get"), "used_micros")
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

    let usage = f.cluster.gwctl(&["usage", "list", "--token", &f.token]).await.expect("usage list");
    let records = usage.as_array().expect("usage list is an array");
    assert_eq!(records.len(), 2, "{usage}");
    for record in records {
        assert_eq!(int_field(record, "cost_micros"), COST);
        assert_eq!(int_field(record, "prompt_tokens"), 11);
        assert_eq!(int_field(record, "completion_tokens"), 7);
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

    f.cluster.gwctl(&["token", "disable", &f.token]).await.expect("token disable");
    let disabled_at = Instant::now();
    for i in 0..2 {
        eventually(&format!("data plane {i} to refuse the disabled token"), Duration::from_secs(1), || async {
            (chat(&f, i, &f.key, false).await.0 == 401).then_some(())
        })
        .await;
    }
    let elapsed = disabled_at.elapsed();
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");

    f.cluster.gwctl(&["token", "enable", &f.token]).await.expect("token enable");
    for i in 0..2 {
        eventually("the token to work again", Duration::from_secs(2), || async {
            (chat(&f, i, &f.key, false).await.0 == 200).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn data_planes_serve_without_the_control_plane_and_usage_lands_once() {
    let mut f = setup().await;
    assert_eq!(chat(&f, 0, &f.key, false).await.0, 200);
    wait_for_charges(&f, 1).await;

    f.cluster.stop_control_plane().await;
    for i in 0..2 {
        for stream in [false, true] {
            let (status, _, body) = chat(&f, i, &f.key, stream).await;
            assert_eq!(status, 200, "data plane {i} stopped serving without the control plane: {body}");
        }
    }
    f.cluster.start_control_plane().await.expect("restart control plane");

    wait_for_charges(&f, 5).await;
    // Settled: give any duplicate report time to show up, then check again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(token_used(&f).await, 5 * COST);
    let usage = f.cluster.gwctl(&["usage", "list", "--token", &f.token]).await.expect("usage list");
    assert_eq!(usage.as_array().map(Vec::len), Some(5), "{usage}");
}

#[tokio::test]
async fn restarted_data_plane_serves_from_its_disk_snapshot() {
    let mut f = setup().await;
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

    let (_, expired) = create_token(&f.cluster, &f.account, &["--expires", "2020-01-01T00:00:00Z"]).await;
    wait_for_revision(&f).await;
    let (s, id, b) = raw(&f, "POST", chat_path, Some(&format!("Bearer {expired}"))).await;
    assert_error(s, &id, &b, 401, "无效的令牌", None);

    // Token quota: $0.0001 is spent by one request of 195 µ$.
    let (_, small) = create_token(&f.cluster, &f.account, &["--quota", "0.0001"]).await;
    wait_until_served(&f, 0, &small).await;
    assert_eq!(chat(&f, 0, &small, false).await.0, 200);
    let (s, id, b) = eventually("the token quota to run out", Duration::from_secs(10), || async {
        let answer = chat(&f, 0, &small, false).await;
        (answer.0 != 200).then_some(answer)
    })
    .await;
    assert_error(s, &id, &b, 403, "该令牌额度已用尽", None);

    // Account balance: $0.0001 left, one request leaves -95 µ$.
    let poor = f
        .cluster
        .gwctl(&["account", "create", "--name", "poor", "--balance", "0.0001", "--groups", "vip"])
        .await
        .expect("account create");
    let (_, poor_key) = create_token(&f.cluster, &str_field(&poor, "id"), &["--unlimited"]).await;
    wait_until_served(&f, 0, &poor_key).await;
    assert_eq!(chat(&f, 0, &poor_key, false).await.0, 200);
    let (s, id, b) = eventually("the balance to run out", Duration::from_secs(10), || async {
        let answer = chat(&f, 0, &poor_key, false).await;
        (answer.0 != 200).then_some(answer)
    })
    .await;
    assert_error(s, &id, &b, 403, "用户额度不足, 剩余额度: ＄-0.000095", Some("insufficient_user_quota"));

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
        let planes = f.cluster.gwctl(&["dataplanes", "list"]).await.ok()?;
        let items = planes.as_array()?;
        let current = |p: &Value| p["acked_revision"].as_u64() >= p["control_plane_revision"].as_u64();
        (items.len() == 2 && items.iter().all(current)).then_some(())
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
    let python = std::env::var("GW_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/openai_chat.py");
    let output = tokio::process::Command::new(&python)
        .arg(script)
        .env("GW_BASE_URL", f.cluster.base_url(0))
        .env("GW_API_KEY", &f.key)
        .env("GW_MODEL", "gpt-4o")
        .output()
        .await
        .unwrap_or_else(|error| panic!("running {python}: {error} (run tests/run, which sets GW_PYTHON)"));
    assert!(
        output.status.success(),
        "SDK script failed (run tests/run, which installs the pinned SDKs):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_slice(&output.stdout).expect("script prints JSON");
    assert_eq!(result["text"], Script::default().reply);
    assert_eq!(result["streamed"], Script::default().reply);
    assert_eq!(result["prompt_tokens"], 11);
    wait_for_charges(&f, 2).await;
}
