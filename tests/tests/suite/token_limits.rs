//! Tokens-per-minute and requests-in-flight limits shared by two data
//! planes, the control plane on real Redis leasing both: reservations of
//! the pair never pass the tokens-per-minute limit, settling gives back what
//! a request did not use and charges what it overran; a third concurrent
//! stream under a limit of 2 is refused on either data plane until one ends
//! or its client goes away. Each test prints what it measured ("Token and
//! concurrency limits" in docs/budgets.md quotes these numbers).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
    seed,
};
use serde_json::{Value, json};

/// Output tokens every chat request here asks for at most.
const MAX_TOKENS: u64 = 100;

struct Fixture {
    cluster: Cluster,
    upstream: MockUpstream,
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
/// to group `fleet`, whose limits are given, and one account in it.
async fn setup(tokens_per_minute: u32, max_in_flight: u32) -> (Fixture, String) {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    let mut admin = cluster.admin();
    let group = pb::Group { name: "fleet".into(), ratio: 1.0, tokens_per_minute, max_in_flight, ..Default::default() };
    admin.create_group(group).await.expect("group create with limits");
    seed::chat_model(&mut admin, &upstream.base_url(), &["fleet"]).await.expect("model and channel");
    let f = Fixture { cluster, upstream, _redis: redis };
    let account = account(&f, "acme").await;
    (f, account)
}

async fn account(f: &Fixture, name: &str) -> String {
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros: 100_000_000,
        groups: vec!["fleet".into()],
        ..Default::default()
    };
    f.cluster.admin().create_account(request).await.expect("account create").into_inner().id
}

/// Creates an unlimited-quota token with the given limits; returns its key
/// once both data planes accept it.
async fn token(f: &Fixture, account: &str, tokens_per_minute: u32, max_in_flight: u32) -> String {
    let request = pb::CreateTokenRequest {
        account_id: account.into(),
        group: "fleet".into(),
        unlimited: true,
        tokens_per_minute,
        max_in_flight,
        ..Default::default()
    };
    let key = f.cluster.admin().create_token(request).await.expect("token create").into_inner().key;
    f.cluster.wait_until_served_everywhere(&key).await;
    key
}

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "gpt-4o",
        "max_tokens": MAX_TOKENS,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

/// The tokens a chat request reserves: its body at 4 bytes a token, plus
/// its `max_tokens`.
fn bound() -> u64 {
    let bytes = serde_json::to_vec(&chat_body(false)).expect("JSON").len() as u64;
    bytes.div_ceil(4) + MAX_TOKENS
}

async fn send(f: &Fixture, i: usize, key: &str, stream: bool) -> reqwest::Response {
    f.cluster
        .http()
        .post(format!("{}/chat/completions", f.cluster.base_url(i)))
        .bearer_auth(key)
        .json(&chat_body(stream))
        .send()
        .await
        .expect("chat request")
}

async fn answer(response: reqwest::Response) -> Answer {
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, request_id, retry_after) =
        (response.status().as_u16(), header("x-request-id").unwrap_or_default(), header("retry-after"));
    Answer { status, request_id, retry_after, body: response.text().await.expect("chat body") }
}

async fn chat(f: &Fixture, i: usize, key: &str) -> Answer {
    answer(send(f, i, key, false).await).await
}

/// Waits, when less than 20 s of the current minute are left, until the next
/// one starts: a tokens-per-minute window edge inside a test would admit
/// the limit twice.
async fn stay_clear_of_a_minute_edge() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
    let left = 60 - now % 60;
    if left < 20 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

/// The catalogue-shaped 429 of a limit: `message` with the request id,
/// `rate_limit_exceeded`, and a `Retry-After` in `retry_after`.
fn assert_limited(answer: &Answer, message: &str, retry_after: std::ops::RangeInclusive<u64>) {
    assert_eq!(answer.status, 429, "{}", answer.body);
    let body: Value = serde_json::from_str(&answer.body).expect("JSON error body");
    assert_eq!(body["error"]["message"], format!("{message} (request id: {})", answer.request_id), "{body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    let seconds: u64 = answer.retry_after.as_deref().expect("429 without Retry-After").parse().expect("whole seconds");
    assert!(retry_after.contains(&seconds), "Retry-After {seconds}, expected {retry_after:?}");
}

#[tokio::test]
async fn two_data_planes_never_reserve_more_than_the_tokens_per_minute_limit() {
    const LIMIT: u32 = 1_500;
    stay_clear_of_a_minute_edge().await;
    let (f, acme) = setup(0, 0).await;
    let key = token(&f, &acme, LIMIT, 0).await;
    // Answers wait, so every admitted request holds its bound at once.
    f.upstream.set_script(Script { first_byte_delay: Duration::from_millis(500), ..Script::default() });

    let requests: Vec<_> = (0..24).map(|i| chat(&f, i % 2, &key)).collect();
    let answers = join_all(requests).await;
    let admitted = answers.iter().filter(|a| a.status == 200).count() as u64;
    let fits = u64::from(LIMIT) / bound();
    eprintln!("measured: {LIMIT} tokens/min, bound {} tokens: the pair admitted {admitted} of 24 at once", bound());
    assert!(admitted * bound() <= u64::from(LIMIT), "{admitted} bounds of {} passed {LIMIT}", bound());
    assert!(admitted + 2 >= fits, "admitted {admitted}, {fits} fit: more than a bound stranded per data plane");
    let message = format!("您已达到Token数限制:1分钟内最多使用{LIMIT}个Token");
    for refused in answers.iter().filter(|a| a.status != 200) {
        assert_limited(refused, &message, 1..=60);
    }
}

#[tokio::test]
async fn settling_gives_back_what_a_request_did_not_use_and_an_overrun_uses_up_the_window() {
    const LIMIT: u32 = 1_000;
    stay_clear_of_a_minute_edge().await;
    let (f, acme) = setup(0, 0).await;
    let key = token(&f, &acme, LIMIT, 0).await;
    // Each answer uses 18 tokens of its bound: 10 × the bound fits only
    // because the unused part comes back.
    let requests = 10 * u64::from(LIMIT) / bound() / 2;
    for n in 0..requests {
        let answer = chat(&f, (n % 2) as usize, &key).await;
        assert_eq!(answer.status, 200, "request {n} of {requests} ({} tokens reserved each): {}", bound(), answer.body);
    }
    eprintln!("measured: {requests} requests of bound {} under {LIMIT} tokens/min all admitted", bound());

    // An answer far longer than its bound charges the window past its limit.
    f.upstream.set_script(Script { prompt_tokens: 2 * LIMIT, ..Script::default() });
    assert_eq!(chat(&f, 0, &key).await.status, 200);
    f.upstream.set_script(Script::default());
    let refused = eventually("both data planes to refuse after the overrun", Duration::from_secs(5), || async {
        let (a, b) = (chat(&f, 0, &key).await, chat(&f, 1, &key).await);
        (a.status == 429 && b.status == 429).then_some(a)
    })
    .await;
    assert_limited(&refused, &format!("您已达到Token数限制:1分钟内最多使用{LIMIT}个Token"), 1..=60);
}

#[tokio::test]
async fn a_third_concurrent_stream_is_refused_on_either_data_plane_until_one_ends() {
    let (f, acme) = setup(0, 0).await;
    let key = token(&f, &acme, 0, 2).await;
    // A slow stream of 40 words, one every 100 ms, then streams ten times as
    // long: every stream but the first outlasts the test, however slow the
    // machine, so only the first one ending frees a slot.
    let slow = |words: usize| Script {
        reply: vec!["word"; words].join(" "),
        chunk_delay: Duration::from_millis(100),
        ..Script::default()
    };
    f.upstream.set_script(slow(40));
    let first = send(&f, 0, &key, true).await;
    f.upstream.set_script(slow(400));
    let second = send(&f, 1, &key, true).await;
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200));
    for plane in 0..2 {
        let third = answer(send(&f, plane, &key, true).await).await;
        assert_limited(&third, "您已达到并发请求数限制:最多同时请求2次", 1..=1);
    }

    // The first stream ends: a new one is admitted on the other data plane.
    let text = first.text().await.expect("stream body");
    assert!(text.contains("[DONE]"), "{text}");
    let third = eventually("a slot once a stream ended", Duration::from_secs(5), || async {
        let response = send(&f, 1, &key, true).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_eq!(answer(send(&f, 0, &key, true).await).await.status, 429, "two streams in flight again");

    // The second stream's client goes away mid-stream: its slot comes back.
    drop(second);
    let fourth = eventually("a slot once a client went away", Duration::from_secs(10), || async {
        let response = send(&f, 0, &key, true).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    drop((third, fourth));
    eprintln!(
        "measured: max_in_flight 2 over two data planes: third stream refused on both, freed on end and disconnect"
    );
}

#[tokio::test]
async fn a_request_that_fails_upstream_gives_its_slot_back() {
    let (f, acme) = setup(0, 0).await;
    let key = token(&f, &acme, 0, 1).await;
    f.upstream.fail_next(400, 1);
    let failed = chat(&f, 0, &key).await;
    assert_eq!(failed.status, 400, "{}", failed.body);
    eventually("a slot once the failed request ended", Duration::from_secs(5), || async {
        (chat(&f, 1, &key).await.status == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_groups_in_flight_limit_counts_per_account() {
    let (f, acme) = setup(0, 1).await;
    let beta = account(&f, "beta").await;
    let (acme_one, acme_two, beta_key) =
        (token(&f, &acme, 0, 0).await, token(&f, &acme, 0, 0).await, token(&f, &beta, 0, 0).await);
    let reply = vec!["word"; 40].join(" ");
    f.upstream.set_script(Script { reply, chunk_delay: Duration::from_millis(100), ..Script::default() });

    let held = send(&f, 0, &acme_one, true).await;
    assert_eq!(held.status(), 200);
    let refused = answer(send(&f, 1, &acme_two, true).await).await;
    assert_limited(&refused, "您已达到并发请求数限制:最多同时请求1次", 1..=1);
    let other = send(&f, 1, &beta_key, true).await;
    assert_eq!(other.status(), 200, "another account has its own slots");
    drop((held, other));
}

#[tokio::test]
async fn gwctl_sets_and_shows_the_limits() {
    let (f, acme) = setup(0, 0).await;
    let group =
        f.cluster.gwctl(&["group", "update", "fleet", "--tokens-per-minute", "60000", "--max-in-flight", "3"]).await;
    let group = group.expect("gwctl group update");
    assert_eq!((group["tokens_per_minute"].as_u64(), group["max_in_flight"].as_u64()), (Some(60_000), Some(3)));
    let token = f
        .cluster
        .gwctl(&["token", "create", "--account", &acme, "--group", "fleet", "--max-in-flight", "1"])
        .await
        .expect("gwctl token create");
    assert_eq!((token["tokens_per_minute"].as_u64(), token["max_in_flight"].as_u64()), (Some(0), Some(1)));
    let key = token["key"].as_str().expect("key").to_owned();

    // The limit set through gwctl reaches the data planes.
    let reply = vec!["word"; 40].join(" ");
    f.upstream.set_script(Script { reply, chunk_delay: Duration::from_millis(100), ..Script::default() });
    let held = eventually("the data plane to know the token", Duration::from_secs(10), || async {
        let response = send(&f, 0, &key, true).await;
        (response.status() == 200).then_some(response)
    })
    .await;
    assert_eq!(answer(send(&f, 1, &key, true).await).await.status, 429);
    drop(held);
}
