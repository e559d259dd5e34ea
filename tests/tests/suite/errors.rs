//! The error catalogue (docs/errors.md) end to end: one case per row, sent
//! through a real data plane, checking status, code, exact message, body
//! shape and the `x-request-id` / `x-should-retry` headers.

use crate::support;

use gw_proto::pb;
use gw_tests::mock::upstream::MockUpstream;
use serde_json::{Value, json};
use support::{Gateway, MODEL, Reply, UPSTREAM_KEY};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What one catalogue row promises.
struct Row {
    what: &'static str,
    status: u16,
    code: Option<&'static str>,
    /// Exact message, without the ` (request id: …)` suffix.
    message: String,
    /// Whether the message ends with the request id (all but `Invalid URL`).
    request_id_suffix: bool,
    /// `x-should-retry: false` present (true) or absent (false).
    no_retry: bool,
}

/// Checks `reply` against `row`: status, OpenAI body shape with exactly
/// `message`, `type`, `param`, `code`, the exact message, the code, and the
/// headers.
fn check(row: &Row, reply: &Reply) {
    let what = row.what;
    assert_eq!(reply.status, row.status, "{what}: {}", reply.text);
    let id = reply.request_id();
    assert_eq!(id.len(), 32, "{what}: request id {id:?}");
    let body = reply.json();
    let object = body.as_object().unwrap_or_else(|| panic!("{what}: body is not an object"));
    assert_eq!(object.keys().collect::<Vec<_>>(), ["error"], "{what}: {body}");
    let error = body["error"].as_object().unwrap_or_else(|| panic!("{what}: no error object: {body}"));
    let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"], "{what}: {body}");
    assert!(error["type"].as_str().is_some_and(|t| !t.is_empty()), "{what}: {body}");
    let message =
        if row.request_id_suffix { format!("{} (request id: {id})", row.message) } else { row.message.clone() };
    assert_eq!(error["message"], message.as_str(), "{what}");
    assert_eq!(error["code"].as_str(), row.code, "{what}: {body}");
    let should_retry = reply.header("x-should-retry");
    if row.no_retry {
        assert_eq!(should_retry, Some("false"), "{what}: clients must not retry");
    } else {
        assert_eq!(should_retry, None, "{what}: clients may retry");
    }
    assert!(!reply.text.contains(UPSTREAM_KEY), "{what}: upstream key leaked");
}

fn row(what: &'static str, status: u16, code: Option<&'static str>, message: impl Into<String>) -> Row {
    let no_retry = matches!(status, 400 | 401 | 403 | 404 | 413) || code == Some("model_not_found");
    Row { what, status, code, message: message.into(), request_id_suffix: true, no_retry }
}

/// Creates an account with `balance_micros` allowed `groups`; returns its id.
async fn account(gw: &Gateway, name: &str, balance_micros: i64, groups: &[&str]) -> String {
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros,
        groups: groups.iter().map(|g| (*g).into()).collect(),
        ..Default::default()
    };
    gw.admin().create_account(request).await.expect("account create").into_inner().id
}

/// Creates the token `request` describes; returns its key.
async fn token(gw: &Gateway, request: pb::CreateTokenRequest) -> String {
    gw.admin().create_token(request).await.expect("token create").into_inner().key
}

/// Sends a request whose declared body is over the 32 MiB limit, without
/// sending the body: the data plane must answer from the headers alone.
async fn oversized(gw: &Gateway, key: &str) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(gw.cluster.data_planes[0].addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        (32 << 20) + 1
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let raw = String::from_utf8(raw).expect("utf-8 answer");
    let (head, text) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').expect("header line");
        let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).expect("header name");
        headers.insert(name, value.trim().parse().expect("header value"));
    }
    Reply { status, headers, text: text.to_owned() }
}

#[tokio::test]
async fn every_catalogue_row_has_its_status_code_message_shape_and_headers() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
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
    let allow_ips = vec!["10.9.8.7".into(), "2001:db8::/32".into()];
    let fenced = token(&gw, pb::CreateTokenRequest { allow_ips, ..support::token(&gw.account) }).await;
    gw.synced().await;

    let key = Some(gw.key.as_str());
    let path = "/v1/chat/completions";
    let mut cases: Vec<(Row, Reply)> = Vec::new();

    let reply = gw.post(0, path, None, &chat(MODEL)).await;
    cases.push((row("no Authorization header", 401, None, "未提供令牌"), reply));
    let reply = gw.post(0, path, Some("sk-not-a-token-of-this-gateway"), &chat(MODEL)).await;
    cases.push((row("unknown key", 401, None, "无效的令牌"), reply));
    let reply = gw.post(0, path, Some(&quota_spent), &chat(MODEL)).await;
    cases.push((row("token quota used up", 403, None, "该令牌额度已用尽"), reply));
    let reply = gw.post(0, path, Some(&poor), &chat(MODEL)).await;
    let message = "用户额度不足, 剩余额度: ＄0.000000";
    cases.push((row("account balance too low", 403, Some("insufficient_user_quota"), message), reply));
    let reply = gw.post(0, path, Some(&restricted), &chat(MODEL)).await;
    cases.push((row("model outside the allowlist", 403, None, format!("该令牌无权访问模型 {MODEL}")), reply));
    let reply = gw.post(0, path, key, &chat("gpt-nonexistent")).await;
    cases.push((row("model not in the catalogue", 404, Some("model_not_found"), "模型不存在: gpt-nonexistent"), reply));
    let reply = gw.post(0, path, Some(&narrow_vip), &chat(MODEL)).await;
    cases.push((row("group the account may not use", 403, None, "无权访问 vip 分组"), reply));
    let reply = gw.post(0, path, Some(&deprecated), &chat(MODEL)).await;
    cases.push((row("deprecated group", 403, None, "分组 old 已被弃用"), reply));
    let reply = gw.post(0, path, Some(&fenced), &chat(MODEL)).await;
    let message = "您的 IP 不在令牌允许访问的列表中";
    cases.push((row("source address not allowed", 403, Some("access_denied"), message), reply));
    for (what, url) in
        [("doubled /v1", "/v1/v1/chat/completions"), ("/v1 alone", "/v1"), ("missing /v1", "/chat/completions")]
    {
        let reply = gw.post(0, url, key, &chat(MODEL)).await;
        let row = Row { request_id_suffix: false, ..row(what, 404, None, format!("Invalid URL (POST {url})")) };
        cases.push((row, reply));
    }
    let reply = gw.post(0, path, key, &chat("gpt-lonely")).await;
    let message = "分组 default 下模型 gpt-lonely 无可用渠道";
    cases.push((row("no channel for group and model", 503, Some("model_not_found"), message), reply));

    let reply = raw_post(&gw, "{bad json").await;
    cases.push((row("malformed JSON", 400, None, "invalid JSON body: key must be a string at line 1 column 2"), reply));
    let reply = gw.post(0, path, key, &json!({"messages": []})).await;
    cases.push((row("missing model", 400, None, "field \"model\" is required"), reply));
    let reply = gw.post(0, path, key, &json!({"model": MODEL})).await;
    cases.push((row("missing messages", 400, None, "field \"messages\" is required"), reply));
    let reply = oversized(&gw, &gw.key).await;
    cases.push((row("body over the limit", 413, None, "request body is larger than 33554432 bytes"), reply));

    // Upstream failure after retries: one channel, every attempt fails.
    upstream.fail_next(502, 100);
    let reply = gw.post(0, path, key, &chat(MODEL)).await;
    let message = "upstream error: scripted failure of the mock upstream (502 Bad Gateway)";
    cases.push((row("upstream failure after retries", 502, None, message), reply));
    assert_eq!(upstream.request_count(), 3, "the default budget is three attempts");
    upstream.fail_next(429, 100);
    let reply = gw.post(0, path, key, &chat(MODEL)).await;
    let message = "upstream error: scripted failure of the mock upstream (429 Too Many Requests)";
    assert_eq!(reply.header("retry-after"), Some("1"), "a 429 says when to come back");
    cases.push((row("upstream rate limit after retries", 429, None, message), reply));

    for (row, reply) in &cases {
        check(row, reply);
    }
    let rows: std::collections::BTreeSet<u16> = cases.iter().map(|(row, _)| row.status).collect();
    assert_eq!(rows.into_iter().collect::<Vec<_>>(), [400, 401, 403, 404, 413, 429, 502, 503]);
}

/// POSTs `body` verbatim (not necessarily JSON) as the test token.
async fn raw_post(gw: &Gateway, body: &str) -> Reply {
    let response = gw
        .cluster
        .http()
        .post(format!("{}/chat/completions", gw.cluster.base_url(0)))
        .bearer_auth(&gw.key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    Reply { status, headers, text: response.text().await.unwrap_or_default() }
}

#[tokio::test]
async fn every_response_carries_a_request_id_even_a_successful_one() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    gw.synced().await;
    for stream in [false, true] {
        let reply = gw.chat(0, stream).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.request_id().len(), 32);
        assert_eq!(reply.header("x-should-retry"), None);
    }
    let models: Value = {
        let response = gw
            .cluster
            .http()
            .get(format!("{}/models", gw.cluster.base_url(0)))
            .bearer_auth(&gw.key)
            .send()
            .await
            .expect("models");
        assert!(response.headers().contains_key("x-request-id"));
        response.json().await.expect("JSON")
    };
    assert_eq!(models["data"][0]["id"], MODEL);
}

#[tokio::test]
async fn a_token_over_its_rate_limit_gets_the_catalogue_429() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    gw.channel("main", &upstream.base_url(), 0, &[]).await;
    let rate_limit = Some(pb::RateLimit { max_requests: 2, window_minutes: 1 });
    let limited = token(&gw, pb::CreateTokenRequest { rate_limit, ..support::token(&gw.account) }).await;
    gw.synced().await;

    let path = "/v1/chat/completions";
    for _ in 0..2 {
        let reply = gw.post(0, path, Some(&limited), &support::chat_body(false)).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
    }
    let reply = gw.post(0, path, Some(&limited), &support::chat_body(false)).await;
    let row = row("rate limit", 429, Some("rate_limit_exceeded"), "您已达到请求数限制:1分钟内最多请求2次");
    check(&row, &reply);
    let retry_after: u64 = reply.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(upstream.request_count(), 2, "a refused request never reaches the upstream");
}
