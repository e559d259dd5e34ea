//! Request-rate limits shared by two data planes: the control plane on real
//! Redis leases permits, so the pair admits exactly the limit; a group's
//! limit counts per account; without the control plane each data plane
//! counts the full limit locally. Each test prints what it measured (the
//! "Rate limits across data planes" in docs/budgets.md quotes these numbers).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use gw_proto::pb;
use gw_tests::{
    harness::{self, Cluster},
    mock::upstream::MockUpstream,
    redis::RedisServer,
};
use serde_json::{Value, json};

/// Every limit here is per hour, so that a test run of a few seconds stays
/// inside one fixed window (see `stay_clear_of_a_window_edge`).
const WINDOW_MINUTES: u64 = 60;

struct Fixture {
    cluster: Cluster,
    _upstream: MockUpstream,
    _redis: RedisServer,
}

/// One answer of a data plane.
struct Answer {
    status: u16,
    request_id: String,
    retry_after: Option<String>,
    body: String,
}

/// Redis, a control plane, two data planes, one upstream serving `gpt-4o`
/// to groups `plain` (no limit) and `limited`, whose limit is given.
async fn setup(group_limit: pb::RateLimit) -> Fixture {
    stay_clear_of_a_window_edge().await;
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model create");
    let group = |name: &str, rate_limit| pb::Group { name: name.into(), ratio: 1.0, rate_limit, ..Default::default() };
    admin.create_group(group("plain", None)).await.expect("group create");
    admin.create_group(group("limited", Some(group_limit))).await.expect("group create with a rate limit");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-rate-limits".into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        groups: vec!["plain".into(), "limited".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel create");
    Fixture { cluster, _upstream: upstream, _redis: redis }
}

/// `max` requests per window of [`WINDOW_MINUTES`].
fn per_window(max: u32) -> pb::RateLimit {
    pb::RateLimit { max_requests: max, window_minutes: WINDOW_MINUTES as u32 }
}

/// No limit (`--rate-limit off`).
const OFF: pb::RateLimit = pb::RateLimit { max_requests: 0, window_minutes: 0 };

/// Waits, when less than a minute of the current hour-long window is left,
/// until the next window starts: a window edge inside a test would let the
/// fixed window admit the limit twice.
async fn stay_clear_of_a_window_edge() {
    let window = WINDOW_MINUTES * 60;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
    let left = window - now % window;
    if left < 60 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

/// Creates an account in groups `plain,limited`; returns its id.
async fn account(f: &Fixture, name: &str) -> String {
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros: 100_000_000,
        groups: vec!["plain".into(), "limited".into()],
        ..Default::default()
    };
    f.cluster.admin().create_account(request).await.expect("account create").into_inner().id
}

/// Creates an unlimited-quota token with `rate_limit`; returns its key once
/// both data planes accept it.
async fn token(f: &Fixture, account: &str, group: &str, rate_limit: Option<pb::RateLimit>) -> String {
    let request = pb::CreateTokenRequest {
        account_id: account.into(),
        group: group.into(),
        unlimited: true,
        rate_limit,
        ..Default::default()
    };
    let key = f.cluster.admin().create_token(request).await.expect("token create").into_inner().key;
    f.cluster.wait_until_served_everywhere(&key).await;
    key
}

async fn chat(f: &Fixture, i: usize, key: &str) -> Answer {
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let response = f
        .cluster
        .http()
        .post(format!("{}/chat/completions", f.cluster.base_url(i)))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("chat request");
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, request_id, retry_after) =
        (response.status().as_u16(), header("x-request-id").unwrap_or_default(), header("retry-after"));
    Answer { status, request_id, retry_after, body: response.text().await.expect("chat body") }
}

/// Sends `rounds` batches, each of `per_plane` concurrent requests to every
/// data plane, cycling through `keys`; returns the answers by data plane.
async fn burst(f: &Fixture, keys: &[&str], rounds: usize, per_plane: usize) -> [Vec<Answer>; 2] {
    let mut answers = [Vec::new(), Vec::new()];
    let mut n = 0;
    for _ in 0..rounds {
        let mut batch = Vec::new();
        for _ in 0..per_plane {
            for plane in 0..2 {
                let key = keys[n % keys.len()];
                n += 1;
                batch.push(async move { (plane, chat(f, plane, key).await) });
            }
        }
        for (plane, answer) in join_all(batch).await {
            answers[plane].push(answer);
        }
    }
    answers
}

fn admitted(answers: &[Answer]) -> usize {
    answers.iter().filter(|a| a.status == 200).count()
}

/// Every answer is a 200 or the catalogue's 429 for `max` requests per hour.
fn assert_ok_or_rate_limited(answers: &[Answer], max: u32) {
    for answer in answers {
        assert!(!answer.request_id.is_empty(), "no x-request-id");
        if answer.status == 200 {
            continue;
        }
        assert_eq!(answer.status, 429, "{}", answer.body);
        let body: Value = serde_json::from_str(&answer.body).expect("JSON error body");
        let expected =
            format!("您已达到请求数限制:{WINDOW_MINUTES}分钟内最多请求{max}次 (request id: {})", answer.request_id);
        assert_eq!(body["error"]["message"], expected.as_str(), "{body}");
        assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
        assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
        let retry_after: u64 = answer
            .retry_after
            .as_deref()
            .expect("429 without Retry-After")
            .parse()
            .expect("Retry-After in whole seconds");
        assert!((1..=WINDOW_MINUTES * 60).contains(&retry_after), "Retry-After {retry_after}");
    }
}

#[tokio::test]
async fn two_data_planes_admit_exactly_a_tokens_limit_between_them() {
    const LIMIT: u32 = 30;
    let f = setup(OFF).await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", Some(per_window(LIMIT))).await;

    // 3 × the limit, in concurrent batches of 3 per data plane.
    let answers = burst(&f, &[&key], 15, 3).await;
    let (first, second) = (admitted(&answers[0]), admitted(&answers[1]));
    eprintln!("measured: token limit {LIMIT}/h, control plane up: data planes admitted {first} + {second} of 90");
    assert_eq!(first + second, LIMIT as usize, "admitted over the pair");
    assert!(first > 0 && second > 0, "one data plane got every permit: {first} + {second}");
    for plane in &answers {
        assert_ok_or_rate_limited(plane, LIMIT);
    }
    // The window is used up: later requests are refused by both.
    for plane in 0..2 {
        assert_eq!(chat(&f, plane, &key).await.status, 429);
    }
}

#[tokio::test]
async fn a_groups_limit_counts_per_account() {
    const LIMIT: u32 = 5;
    let f = setup(per_window(LIMIT)).await;
    let (acme, beta) = (account(&f, "acme").await, account(&f, "beta").await);
    let acme_one = token(&f, &acme, "limited", None).await;
    let acme_two = token(&f, &acme, "limited", None).await;
    let beta_key = token(&f, &beta, "limited", None).await;
    let plain = token(&f, &acme, "plain", None).await;

    // Two tokens of one account share its count.
    let answers = burst(&f, &[&acme_one, &acme_two], 8, 1).await;
    let acme_admitted = admitted(&answers[0]) + admitted(&answers[1]);
    let answers_beta = burst(&f, &[&beta_key], 8, 1).await;
    let beta_admitted = admitted(&answers_beta[0]) + admitted(&answers_beta[1]);
    eprintln!(
        "measured: group limit {LIMIT}/h, control plane up: acme {acme_admitted} of 16, beta {beta_admitted} of 16"
    );
    assert_eq!((acme_admitted, beta_admitted), (LIMIT as usize, LIMIT as usize), "each account gets the limit");
    for plane in answers.iter().chain(&answers_beta) {
        assert_ok_or_rate_limited(plane, LIMIT);
    }
    // The same account in a group without a limit is not held back.
    let answers = burst(&f, &[&plain], 4, 1).await;
    assert_eq!(admitted(&answers[0]) + admitted(&answers[1]), 8);
}

#[tokio::test]
async fn without_the_control_plane_each_data_plane_counts_the_limit_locally() {
    const LIMIT: u32 = 5;
    let mut f = setup(OFF).await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", Some(per_window(LIMIT))).await;

    f.cluster.stop_control_plane().await;
    let answers = burst(&f, &[&key], 15, 1).await;
    let (first, second) = (admitted(&answers[0]), admitted(&answers[1]));
    eprintln!("measured: token limit {LIMIT}/h, control plane down: data planes admitted {first} + {second} of 30");
    assert_eq!((first, second), (LIMIT as usize, LIMIT as usize), "each data plane admits the full limit, no more");
    for plane in &answers {
        assert_ok_or_rate_limited(plane, LIMIT);
    }
}

#[tokio::test]
async fn the_openai_python_sdk_raises_rate_limit_error_on_our_429() {
    const LIMIT: u32 = 2;
    let f = setup(OFF).await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", Some(per_window(LIMIT))).await;
    let base_url = f.cluster.base_url(0);
    let env = [("GW_BASE_URL", base_url.as_str()), ("GW_API_KEY", &key), ("GW_MODEL", "gpt-4o"), ("GW_ATTEMPTS", "5")];
    let result = harness::sdk("openai_rate_limit.py", &[], &env).await;
    assert_eq!(result["admitted"], LIMIT, "{result}");
    let refusal = &result["refusal"];
    assert_eq!(refusal["class"], "RateLimitError", "{result}");
    assert_eq!(refusal["status"], 429);
    assert_eq!(refusal["code"], "rate_limit_exceeded");
    assert_eq!(refusal["type"], "rate_limit_error");
    let request_id = refusal["request_id"].as_str().expect("x-request-id");
    let expected = format!("您已达到请求数限制:{WINDOW_MINUTES}分钟内最多请求{LIMIT}次 (request id: {request_id})");
    assert_eq!(refusal["message"], expected.as_str());
    let retry_after: u64 = refusal["retry_after"].as_str().expect("Retry-After").parse().expect("seconds");
    assert!((1..=WINDOW_MINUTES * 60).contains(&retry_after), "Retry-After {retry_after}");
}

#[tokio::test]
async fn permits_leased_to_an_idle_data_plane_are_spent_only_there() {
    // A limit of 30 is leased 3 at a time (a tenth of it).
    const LIMIT: u32 = 30;
    const LEASE: usize = 3;
    let f = setup(OFF).await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", Some(per_window(LIMIT))).await;

    // Data plane 1 leases 3 permits and spends one; then only 0 is used.
    assert_eq!(chat(&f, 1, &key).await.status, 200);
    let mut busy = Vec::new();
    for _ in 0..2 * LIMIT {
        busy.push(chat(&f, 0, &key).await);
    }
    assert_ok_or_rate_limited(&busy, LIMIT);
    let stranded = LIMIT as usize - 1 - admitted(&busy);
    eprintln!(
        "measured: token limit {LIMIT}/h, lease {LEASE}: busy data plane admitted {} while the idle one held {stranded}",
        admitted(&busy)
    );
    assert_eq!(stranded, LEASE - 1, "the idle data plane keeps the rest of its lease");
    // The idle data plane spends what it holds, and not one more.
    let mut idle = Vec::new();
    for _ in 0..2 * LEASE {
        idle.push(chat(&f, 1, &key).await);
    }
    assert_ok_or_rate_limited(&idle, LIMIT);
    assert_eq!(admitted(&idle), stranded);
}
