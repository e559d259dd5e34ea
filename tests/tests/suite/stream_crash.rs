//! A stream cut by a data-plane crash is billed for what its client
//! received: the data plane runs as a child process, a long stream is read
//! for a few seconds, the data plane is killed with SIGKILL mid-stream and
//! restarted, and the ledger's record of that request counts the tokens
//! the client had, to within the last second's events (the spool learns a
//! stream's progress at most once a second).

use std::time::Duration;

use futures_util::StreamExt as _;
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, Mode, eventually},
    mock::upstream::{MockUpstream, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};

/// Words in the answer, one chunk (and one token) each.
const WORDS: usize = 400;
/// Between two chunks: ten chunks a second.
const CHUNK_DELAY: Duration = Duration::from_millis(100);
/// Chunks read before the crash (three seconds of the stream).
const READ_BEFORE_CRASH: usize = 30;
/// Chunks one second of the stream carries, the most the bill may lag.
const CHUNKS_PER_SECOND: i64 = 10;

#[tokio::test]
async fn a_stream_cut_by_a_crash_is_billed_for_what_its_client_received() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script {
        reply: vec!["hello"; WORDS].join(" "),
        chunk_delay: CHUNK_DELAY,
        ..Script::default()
    });
    let mut cluster = Cluster::start_with(Mode::Processes, &redis.url(), 1, |_| {}).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "gpt-4o".into(),
        category: "chat".into(),
        input_price_micros: 2_500_000,
        output_price_micros: 10_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-stream-crash".into(),
        has_key: true,
        models: vec!["gpt-4o".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    let account = pb::CreateAccountRequest { name: "acme".into(), balance_micros: 100_000_000, ..Default::default() };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token =
        pb::CreateTokenRequest { account_id: account, group: "default".into(), unlimited: true, ..Default::default() };
    let created = admin.create_token(token).await.expect("token").into_inner();
    let (token, key) = (created.token.expect("token").id, created.key);
    cluster.wait_until_served(0, &key).await;

    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "say hello"}], "stream": true});
    let url = format!("{}/chat/completions", cluster.base_url(0));
    let response = cluster.http().post(url).bearer_auth(&key).json(&body).send().await.expect("stream");
    assert_eq!(response.status(), 200);
    let request_id = response.headers()["x-request-id"].to_str().expect("request id").to_owned();
    let mut received = 0;
    let mut buffer = String::new();
    let mut body = response.bytes_stream();
    while received < READ_BEFORE_CRASH {
        let chunk = body.next().await.expect("the stream goes on").expect("a chunk");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event.trim().trim_start_matches("data: ");
            let content = serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| v["choices"][0]["delta"]["content"].as_str().map(|text| !text.trim().is_empty()));
            received += usize::from(content == Some(true));
        }
    }
    cluster.crash_data_plane(0).await;
    // Whatever the socket still held may have reached the client too.
    while let Some(Ok(chunk)) = body.next().await {
        received += String::from_utf8_lossy(&chunk).matches("hello").count();
    }
    cluster.start_data_plane(0).await.expect("the data plane restarts");

    let record = eventually("the cut stream's record", Duration::from_secs(30), || async {
        let request = pb::ListUsageRequest { token_id: token.clone(), limit: 10, ..Default::default() };
        let items = cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        items.into_iter().find(|r| r.request_id == request_id)
    })
    .await;
    let received = i64::try_from(received).expect("a count");
    println!(
        "client received {received} tokens; billed {} completion tokens, {} µ$",
        record.completion_tokens, record.cost_micros
    );
    assert!(record.estimated, "{record:?}");
    assert!(
        record.completion_tokens >= received - CHUNKS_PER_SECOND - 1,
        "billed {} completion tokens, the client received {received}",
        record.completion_tokens
    );
    assert!(record.completion_tokens <= received + 1, "billed more than was sent: {record:?}");
    let prompt_only = record.prompt_tokens * 2_500_000 / 1_000_000;
    assert!(record.cost_micros >= prompt_only + record.completion_tokens * 10, "{record:?}");
}
