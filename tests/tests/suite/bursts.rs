//! Bursts of streams on a capped budget: two data planes on one control
//! plane and real Redis, every stream of a burst opened at once and held
//! open by a slow upstream, so all its reservations stand together: 2,000
//! on one data plane, or 1,000 on each of two. A budget that covers the
//! burst admits every stream; one that does not refuses the rest with the
//! catalogue's 403, never a 503 (which would say the control plane is
//! unreachable, and it is not).
//!
//! The planes run as processes, as they are deployed: in the test's own
//! runtime the control plane shared four worker threads with the burst's
//! 2,000 clients, both data planes and the upstream, and on a 2-core
//! machine a lease call waited about two seconds before the control plane
//! even began to answer it (then took a tenth of that), so the data plane
//! gave up on a control plane that was only starved by its neighbours.

use std::time::Duration;

use futures_util::future::join_all;
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};

const DATA_PLANES: usize = 2;
/// The bound of each request, so each reserves about
/// `MAX_TOKENS` × the output price.
const MAX_TOKENS: i64 = 1_000;
/// $10 per million output tokens: a stream reserves about 10,000 µ$.
const OUTPUT_PRICE: i64 = 10_000_000;

struct Fixture {
    cluster: Cluster,
    _upstream: MockUpstream,
    _redis: RedisServer,
}

struct Customer {
    account: String,
    key: String,
}

/// What one stream of a burst ended as.
#[derive(Debug)]
enum Outcome {
    /// A 200 whose stream reached `[DONE]`.
    Streamed,
    /// Any other answer: its status and the error body.
    Refused(u16, Value),
}

async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    // Each stream lasts about a second and a half: every stream of a burst
    // still holds its reservation when the last one is admitted.
    upstream.set_script(Script {
        reply: "one two three four five six".into(),
        chunk_delay: Duration::from_millis(300),
        ..Script::default()
    });
    let cluster = Cluster::start_processes(&redis.url(), DATA_PLANES).await.expect("the planes as processes");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "coder".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: OUTPUT_PRICE,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-bursts".into(),
        has_key: true,
        models: vec!["coder".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    Fixture { cluster, _upstream: upstream, _redis: redis }
}

/// An account with `balance` µ$ and an unlimited token, known to every
/// data plane.
async fn customer(f: &Fixture, name: &str, balance: i64) -> Customer {
    let mut admin = f.cluster.admin();
    let request = pb::CreateAccountRequest { name: name.into(), balance_micros: balance, ..Default::default() };
    let account = admin.create_account(request).await.expect("account").into_inner().id;
    let request = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "default".into(),
        unlimited: true,
        ..Default::default()
    };
    let key = admin.create_token(request).await.expect("token").into_inner().key;
    f.cluster.wait_until_served_everywhere(&key).await;
    Customer { account, key }
}

/// One streamed chat request to data plane `i`, read to its end.
async fn stream(http: reqwest::Client, url: String, key: String) -> Outcome {
    let body = json!({
        "model": "coder",
        "messages": [{"role": "user", "content": "write the function"}],
        "max_tokens": MAX_TOKENS,
        "stream": true,
    });
    let response = http.post(url).bearer_auth(key).json(&body).send().await.expect("an answer");
    let status = response.status().as_u16();
    let text = response.text().await.expect("the whole body");
    if status == 200 && text.lines().any(|line| line == "data: [DONE]") {
        Outcome::Streamed
    } else {
        Outcome::Refused(status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}

/// `per_plane` streams opened at once on each of the first `planes` data
/// planes; every outcome.
async fn burst(f: &Fixture, key: &str, planes: usize, per_plane: usize) -> Vec<Outcome> {
    let streams = (0..planes * per_plane).map(|n| {
        let url = format!("{}/chat/completions", f.cluster.base_url(n % planes));
        tokio::spawn(stream(f.cluster.http().clone(), url, key.to_owned()))
    });
    join_all(streams).await.into_iter().map(|outcome| outcome.expect("stream task")).collect()
}

async fn balance(f: &Fixture, account: &str) -> i64 {
    let request = pb::GetRequest { id: account.into() };
    f.cluster.admin().get_account(request).await.expect("account").into_inner().balance_micros
}

/// A burst of `per_plane` streams on each of `planes` data planes, on a
/// balance that covers it: every stream is admitted and billed.
async fn covered_burst(f: &Fixture, name: &str, planes: usize, per_plane: usize) {
    let c = customer(f, name, 100_000_000_000).await;
    let outcomes = burst(f, &c.key, planes, per_plane).await;
    let refused: Vec<_> = outcomes.iter().filter(|o| !matches!(o, Outcome::Streamed)).collect();
    println!("{} streams at once on {planes} data planes, {} refused", outcomes.len(), refused.len());
    assert!(refused.is_empty(), "{} of {} refused, first: {:?}", refused.len(), outcomes.len(), refused.first());
    // Every stream is billed.
    eventually("every stream billed", Duration::from_secs(30), || async {
        (balance(f, &c.account).await < 100_000_000_000).then_some(())
    })
    .await;
}

/// A burst of `per_plane` streams on each of the data planes, on a balance
/// for about half of it: some are admitted, the rest refused with the 403.
async fn burst_past_the_balance(f: &Fixture, per_plane: usize) {
    // About half the burst's reservations.
    let cap = (DATA_PLANES * per_plane) as i64 / 2 * MAX_TOKENS * OUTPUT_PRICE / 1_000_000;
    let c = customer(f, "short", cap).await;
    let outcomes = burst(f, &c.key, DATA_PLANES, per_plane).await;
    let streamed = outcomes.iter().filter(|o| matches!(o, Outcome::Streamed)).count();
    println!("{} streams at once on a balance for about half: {streamed} admitted", outcomes.len());
    assert!(streamed > 0, "a balance for half the burst admits some of it");
    assert!(streamed < outcomes.len(), "the balance cannot cover the whole burst");
    for outcome in &outcomes {
        let Outcome::Refused(status, body) = outcome else { continue };
        assert_eq!(*status, 403, "refused with {status}, not the 403: {body}");
        assert_eq!(body["error"]["code"], "insufficient_user_quota", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("用户额度不足, 剩余额度: ＄"), "{message}");
    }
}

// One test, its bursts one after another: two bursts of 2,000 streams at
// once on one small machine would measure each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bursts_of_2000_streams_are_admitted_whole_when_covered_and_refused_with_the_403_never_503_when_not() {
    let f = setup().await;
    covered_burst(&f, "fleet-on-one", 1, 2_000).await;
    covered_burst(&f, "fleet-on-two", DATA_PLANES, 1_000).await;
    burst_past_the_balance(&f, 1_000).await;
}
