//! Request-rate limits shared by two data planes: the control plane on real
//! Redis leases permits, so the pair admits exactly the limit; a group's
//! limit counts per account; without the control plane each data plane
//! counts the full limit locally. Each test prints what it measured (the
//! README's "Rate limits across data planes" quotes these numbers).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use gw_tests::{
    harness::{Cluster, eventually},
    mock_upstream::MockUpstream,
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
async fn setup(group_limit: &str) -> Fixture {
    stay_clear_of_a_window_edge().await;
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    cluster
        .gwctl(&["model", "create", "--id", "gpt-4o", "--input-price", "2.5", "--output-price", "10"])
        .await
        .expect("model create");
    cluster.gwctl(&["group", "create", "--name", "plain"]).await.expect("group create");
    cluster
        .gwctl(&["group", "create", "--name", "limited", "--rate-limit", group_limit])
        .await
        .expect("group create with a rate limit");
    let base_url = upstream.base_url();
    cluster
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
            "sk-upstream-rate-limits",
            "--models",
            "gpt-4o",
            "--groups",
            "plain,limited",
        ])
        .await
        .expect("channel create");
    Fixture { cluster, _upstream: upstream, _redis: redis }
}

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
    let created = f
        .cluster
        .gwctl(&["account", "create", "--name", name, "--balance", "100", "--groups", "plain,limited"])
        .await
        .expect("account create");
    created["id"].as_str().expect("account id").to_owned()
}

/// Creates an unlimited-quota token; returns its key once both data planes
/// accept it.
async fn token(f: &Fixture, account: &str, group: &str, extra: &[&str]) -> String {
    let mut args = vec!["token", "create", "--account", account, "--group", group, "--unlimited"];
    args.extend_from_slice(extra);
    let created = f.cluster.gwctl(&args).await.expect("token create");
    let key = created["key"].as_str().expect("token key").to_owned();
    for i in 0..2 {
        let url = format!("{}/models", f.cluster.base_url(i));
        eventually(&format!("data plane {i} to know the token"), Duration::from_secs(10), || async {
            let response = f.cluster.http().get(&url).bearer_auth(&key).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
    }
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
    let f = setup("off").await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", &["--rate-limit", &format!("{LIMIT}/{WINDOW_MINUTES}")]).await;

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
    let f = setup(&format!("{LIMIT}/{WINDOW_MINUTES}")).await;
    let (acme, beta) = (account(&f, "acme").await, account(&f, "beta").await);
    let acme_one = token(&f, &acme, "limited", &[]).await;
    let acme_two = token(&f, &acme, "limited", &[]).await;
    let beta_key = token(&f, &beta, "limited", &[]).await;
    let plain = token(&f, &acme, "plain", &[]).await;

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
    let mut f = setup("off").await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", &["--rate-limit", &format!("{LIMIT}/{WINDOW_MINUTES}")]).await;

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
    let f = setup("off").await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", &["--rate-limit", &format!("{LIMIT}/{WINDOW_MINUTES}")]).await;
    let python = std::env::var("GW_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/openai_rate_limit.py");
    let output = tokio::process::Command::new(&python)
        .arg(script)
        .env("GW_BASE_URL", f.cluster.base_url(0))
        .env("GW_API_KEY", &key)
        .env("GW_MODEL", "gpt-4o")
        .env("GW_ATTEMPTS", "5")
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
    let f = setup("off").await;
    let acme = account(&f, "acme").await;
    let key = token(&f, &acme, "plain", &["--rate-limit", &format!("{LIMIT}/{WINDOW_MINUTES}")]).await;

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
