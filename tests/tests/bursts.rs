//! Bursts of streams on a capped budget: two data planes on one control
//! plane and real Redis, every stream of a burst opened at once and held
//! open by a slow upstream, so all its reservations stand together. A
//! budget that covers the burst admits every stream; one that does not
//! refuses the rest with the catalogue's 403, never a 503 (which would say
//! the control plane is unreachable, and it is not).

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
/// Streams opened at once on each data plane. Both data planes, the
/// control plane, the upstream and every client share this process (and a
/// small machine's cores): 500 each keeps the first lease answer well
/// under the data plane's 2 s call timeout; bursts of 1,000 and 2,000 per
/// data plane are the budget step's own tests (`policy::budget`).
const STREAMS_PER_PLANE: usize = 500;
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
    let cluster = Cluster::start(&redis.url(), DATA_PLANES).await.expect("cluster");
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

/// `STREAMS_PER_PLANE` streams opened at once on each data plane; every
/// outcome.
async fn burst(f: &Fixture, key: &str) -> Vec<Outcome> {
    let streams = (0..DATA_PLANES * STREAMS_PER_PLANE).map(|n| {
        let url = format!("{}/chat/completions", f.cluster.base_url(n % DATA_PLANES));
        tokio::spawn(stream(f.cluster.http().clone(), url, key.to_owned()))
    });
    join_all(streams).await.into_iter().map(|outcome| outcome.expect("stream task")).collect()
}

async fn balance(f: &Fixture, account: &str) -> i64 {
    let request = pb::GetRequest { id: account.into() };
    f.cluster.admin().get_account(request).await.expect("account").into_inner().balance_micros
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_streams_on_two_data_planes_is_admitted_whole_when_the_balance_covers_it() {
    let f = setup().await;
    let c = customer(&f, "fleet", 100_000_000_000).await;
    let outcomes = burst(&f, &c.key).await;
    let refused: Vec<_> = outcomes.iter().filter(|o| !matches!(o, Outcome::Streamed)).collect();
    println!("{} streams at once on {DATA_PLANES} data planes, {} refused", outcomes.len(), refused.len());
    assert!(refused.is_empty(), "{} of {} refused, first: {:?}", refused.len(), outcomes.len(), refused.first());
    // Every stream is billed.
    eventually("every stream billed", Duration::from_secs(30), || async {
        (balance(&f, &c.account).await < 100_000_000_000).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_past_the_balance_is_refused_with_the_403_never_503() {
    let f = setup().await;
    // About half the burst's reservations.
    let cap = (DATA_PLANES * STREAMS_PER_PLANE) as i64 / 2 * MAX_TOKENS * OUTPUT_PRICE / 1_000_000;
    let c = customer(&f, "short", cap).await;
    let outcomes = burst(&f, &c.key).await;
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
