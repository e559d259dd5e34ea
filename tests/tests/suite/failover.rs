//! Upstream failures end to end: failover between channels and priority
//! levels, retries that stop at the first byte, clean errors when every
//! channel is down, timeouts, client disconnects, and channels taken out of
//! rotation after repeated failures. Real Redis, the control plane and data
//! planes in-process, mock upstreams.

use crate::support;

use std::time::{Duration, Instant};

use gw_proto::pb;
use gw_tests::{
    harness::{eventually, free_port},
    mock::upstream::{MockUpstream, Script},
};
use support::{Gateway, UPSTREAM_KEY, streamed_text};

/// A mock upstream whose replies say `who` answered.
async fn upstream(who: &str) -> MockUpstream {
    let mock = MockUpstream::start().await.expect("mock upstream");
    mock.set_script(Script { reply: format!("reply from {who}"), ..Script::default() });
    mock
}

fn reply_text(reply: &support::Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
}

/// Asserts a clean upstream failure: the status, an OpenAI body whose
/// message names no key or upstream address, an `x-request-id` and no
/// `x-should-retry` (the client may retry later).
fn assert_clean_upstream_failure(reply: &support::Reply, status: u16, message: &str, upstreams: &[&MockUpstream]) {
    assert_eq!(reply.status, status, "{}", reply.text);
    let id = reply.request_id();
    assert_eq!(reply.json()["error"]["message"], format!("{message} (request id: {id})"));
    assert!(reply.header("x-should-retry").is_none(), "an upstream failure may be retried by the client");
    assert!(!reply.text.contains(UPSTREAM_KEY), "{}", reply.text);
    for mock in upstreams {
        assert!(!reply.text.contains(&mock.addr().port().to_string()), "upstream address leaked: {}", reply.text);
    }
}

#[tokio::test]
async fn a_502_fails_over_to_the_next_priority_level() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    gw.channel("a", &a.base_url(), 10, &[]).await;
    let b_id = gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;

    a.fail_next(502, 1);
    assert_eq!(reply_text(&gw.chat(0, false).await), "reply from b");
    assert_eq!((a.request_count(), b.request_count()), (1, 1), "a is tried first, once");
    let records = gw.wait_for_usage(1).await;
    assert_eq!(records[0]["channel_id"], b_id.as_str(), "billed to the channel that answered");
    assert_eq!(records[0]["status"], 200);

    // Healthy again: the higher priority channel takes the traffic back.
    assert_eq!(stream_text(&gw.chat(0, true).await), "reply from a");
    assert_eq!((a.request_count(), b.request_count()), (2, 1));
}

fn stream_text(reply: &support::Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.text);
    streamed_text(&reply.text)
}

#[tokio::test]
async fn a_failing_channel_fails_over_within_its_level_before_dropping_a_level() {
    let gw = Gateway::start(1).await;
    let (a, b, c) = (upstream("a").await, upstream("b").await, upstream("c").await);
    gw.channel("a", &a.base_url(), 5, &[]).await;
    gw.channel("b", &b.base_url(), 5, &[]).await;
    gw.channel("c", &c.base_url(), 0, &[]).await;
    gw.synced().await;

    a.fail_next(503, 100);
    for _ in 0..6 {
        assert_eq!(reply_text(&gw.chat(0, false).await), "reply from b");
    }
    assert_eq!(b.request_count(), 6);
    assert!(a.request_count() <= 6, "a was tried again within one request: {}", a.request_count());
    assert_eq!(c.request_count(), 0, "the lower level was used while the top level still had a channel");
}

#[tokio::test]
async fn all_channels_down_is_one_clean_5xx_after_bounded_attempts() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 5, &[]).await;
    // Nothing listens on this port: a connection error.
    let dead = format!("http://127.0.0.1:{}/v1", free_port());
    gw.channel("dead", &dead, 0, &[]).await;
    gw.synced().await;

    a.fail_next(503, 100);
    b.fail_next(500, 100);
    let reply = gw.chat(0, false).await;
    // Three attempts (the default budget): a, b, then the dead channel.
    assert_eq!((a.request_count(), b.request_count()), (1, 1));
    assert_clean_upstream_failure(&reply, 502, "upstream connection failed", &[&a, &b]);
    assert!(!reply.text.contains(&dead), "{}", reply.text);

    // With only upstream error answers left, the last one reaches the client.
    let disable = pb::UpdateChannelRequest {
        id: channel_id(&gw, "dead").await,
        status: Some("disabled".into()),
        ..Default::default()
    };
    gw.admin().update_channel(disable).await.expect("disable");
    gw.synced().await;
    let reply = gw.chat(0, true).await;
    // a, b, then a second round from the top after a backoff.
    assert_eq!((a.request_count(), b.request_count()), (3, 2), "three more attempts, no more");
    let message = "upstream error: scripted failure of the mock upstream (503 Service Unavailable)";
    assert_clean_upstream_failure(&reply, 503, message, &[&a, &b]);
}

async fn channel_id(gw: &Gateway, name: &str) -> String {
    let list = gw.admin().list_channels(pb::ListRequest::default()).await.expect("channel list").into_inner();
    let found = list.items.into_iter().find(|c| c.name == name);
    found.unwrap_or_else(|| panic!("no channel {name}")).id
}

#[tokio::test]
async fn client_errors_from_upstream_are_final_and_masked() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;

    a.fail_next(400, 1);
    let reply = gw.chat(0, false).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    assert_eq!((a.request_count(), b.request_count()), (1, 0), "a 400 is never retried");

    // The upstream refuses the channel's key and, like OpenAI, quotes it.
    a.set_script(Script { expected_key: Some("sk-the-right-one".into()), ..Script::default() });
    let reply = gw.chat(0, false).await;
    assert_eq!(reply.status, 401, "{}", reply.text);
    assert_eq!(reply.header("x-should-retry"), Some("false"));
    let id = reply.request_id().to_owned();
    let message = format!("upstream error: Incorrect API key provided: *** (request id: {id})");
    assert_eq!(reply.json()["error"]["message"], message);
    assert_eq!((a.request_count(), b.request_count()), (2, 0), "a 401 is never retried");
}

#[tokio::test]
async fn a_stream_cut_midway_reaches_the_client_is_billed_and_is_not_retried() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    let a_id = gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;
    a.set_script(Script { reply: "one two three four".into(), cut_stream_after: Some(2), ..Script::default() });

    let response = gw
        .cluster
        .http()
        .post(format!("{}/chat/completions", gw.cluster.base_url(0)))
        .bearer_auth(&gw.key)
        .json(&support::chat_body(true))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let mut response = response;
    let mut received = Vec::new();
    let ended = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    let text = String::from_utf8(received).expect("utf-8");
    assert_eq!(streamed_text(&text), "one two ", "the client gets what was streamed: {text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(ended.is_err(), "the client must see the stream break, not a clean end");
    assert_eq!((a.request_count(), b.request_count()), (1, 0), "nothing is retried after the first byte");

    let records = gw.wait_for_usage(1).await;
    let record = &records[0];
    assert_eq!(record["channel_id"], a_id.as_str());
    assert_eq!(record["status"], 502);
    assert_eq!(record["estimated"], true, "{record}");
    // The tokenizer's count of what was streamed: "one", " two", " ".
    assert_eq!(record["completion_tokens"], 3, "{record}");
    assert!(record["cost_micros"].as_i64() > Some(0), "{record}");
}

#[tokio::test]
async fn a_first_byte_timeout_fails_over() {
    let gw = Gateway::start(1).await;
    let (slow, b) = (upstream("slow").await, upstream("b").await);
    gw.channel("slow", &slow.base_url(), 10, &["--first-byte-timeout-ms", "300"]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;
    slow.set_script(Script { first_byte_delay: Duration::from_secs(5), ..Script::default() });

    for stream in [false, true] {
        let started = Instant::now();
        let reply = gw.chat(0, stream).await;
        let text = if stream { stream_text(&reply) } else { reply_text(&reply) };
        assert_eq!(text, "reply from b");
        assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    }
    assert_eq!((slow.request_count(), b.request_count()), (2, 2));
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_and_pays_for_what_it_got() {
    let gw = Gateway::start(1).await;
    let a = upstream("a").await;
    let a_id = gw.channel("a", &a.base_url(), 0, &[]).await;
    gw.synced().await;
    let words = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    a.set_script(Script { reply: words, chunk_delay: Duration::from_millis(100), ..Script::default() });

    let mut response = gw
        .cluster
        .http()
        .post(format!("{}/chat/completions", gw.cluster.base_url(0)))
        .bearer_auth(&gw.key)
        .json(&support::chat_body(true))
        .send()
        .await
        .expect("request");
    let mut received = String::new();
    while received.matches("data: ").count() < 2 {
        let chunk = response.chunk().await.expect("chunk").expect("stream ended early");
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);

    eventually("the upstream stream to be abandoned", Duration::from_secs(10), || async {
        (a.abandoned_streams() == 1).then_some(())
    })
    .await;
    let records = gw.wait_for_usage(1).await;
    let record = &records[0];
    assert_eq!(record["channel_id"], a_id.as_str());
    assert_eq!(record["status"], 499, "{record}");
    assert_eq!(record["estimated"], true, "{record}");
    let billed = record["completion_tokens"].as_i64().unwrap_or_default();
    assert!((2..40).contains(&billed), "billed {billed} chunks of 40: {record}");
}

#[tokio::test]
async fn a_channel_that_keeps_failing_is_auto_disabled_everywhere_until_enabled() {
    let gw = Gateway::start(2).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    let a_id = gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;

    // 5xx count against a channel only across different clients, and one
    // data plane of two cannot disable it alone: both see it fail.
    let other = gw.admin().create_token(support::token(&gw.account)).await.expect("token").into_inner().key;
    a.fail_next(500, 1000);
    for i in 0..10 {
        let key = if (i / 2) % 2 == 0 { &gw.key } else { &other };
        let reply = gw.post(i % 2, "/v1/chat/completions", Some(key), &support::chat_body(false)).await;
        assert_eq!(reply_text(&reply), "reply from b");
    }
    assert_eq!(a.request_count(), 10);
    eventually("channel a to be auto-disabled", Duration::from_secs(10), || async {
        (gw.channel_status(&a_id).await == "auto_disabled").then_some(())
    })
    .await;
    gw.synced().await;

    for i in [0, 1, 0, 1] {
        assert_eq!(reply_text(&gw.chat(i, false).await), "reply from b", "data plane {i}");
    }
    assert_eq!(a.request_count(), 10, "no data plane sends to an auto-disabled channel");

    a.fail_next(500, 0);
    let enable = pb::UpdateChannelRequest { id: a_id.clone(), status: Some("enabled".into()), ..Default::default() };
    gw.admin().update_channel(enable).await.expect("channel enable");
    assert_eq!(gw.channel_status(&a_id).await, "enabled");
    gw.synced().await;
    for i in [0, 1] {
        assert_eq!(reply_text(&gw.chat(i, false).await), "reply from a", "data plane {i}");
    }
}

#[tokio::test]
async fn an_auto_disabled_channel_is_probed_back_into_rotation_but_a_disabled_one_is_not() {
    use gw_control_plane::domain::{AUTO_DISABLED, Channel, ENABLED, Kind, Resource};

    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = gw_control_plane::Config::new("127.0.0.1:0".parse().expect("address"), dir.path());
    config.probe.interval = Duration::from_millis(100);
    let cp = gw_control_plane::start(config).await.expect("control plane");
    let (flaky, off) = (upstream("flaky").await, upstream("off").await);
    flaky.set_script(Script { expected_key: Some(UPSTREAM_KEY.into()), ..Script::default() });
    flaky.fail_next(503, 3);
    let channel = |id: &str, base_url: String, status: &str| Channel {
        id: id.into(),
        name: id.into(),
        kind: "openai".into(),
        base_url,
        api_key: UPSTREAM_KEY.into(),
        models: vec!["gpt-4o".into()],
        model_map: Default::default(),
        groups: vec!["default".into()],
        priority: 0,
        weight: 1,
        status: status.into(),
        connect_timeout_ms: 0,
        first_byte_timeout_ms: 0,
        idle_timeout_ms: 0,
        total_timeout_ms: 0,
        keys: Vec::new(),
        settings: Default::default(),
    };
    cp.store.create(Resource::Channel(channel("flaky", flaky.base_url(), AUTO_DISABLED))).await.expect("create");
    cp.store.create(Resource::Channel(channel("off", off.base_url(), "disabled"))).await.expect("create");

    let status = |id: &'static str| {
        let store = cp.store.clone();
        async move {
            match store.get(Kind::Channel, id).await.expect("get") {
                Some(Resource::Channel(channel)) => channel.status,
                other => panic!("no channel {id}: {other:?}"),
            }
        }
    };
    eventually("the probe to re-enable the channel", Duration::from_secs(10), || async {
        (status("flaky").await == ENABLED).then_some(())
    })
    .await;
    let probes = flaky.requests();
    assert!(probes.len() >= 4, "three failed probes, then a good one: {}", probes.len());
    for probe in &probes {
        assert_eq!((probe.method.as_str(), probe.path.as_str()), ("GET", "/v1/models"));
        assert_eq!(probe.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
    }
    assert_eq!(status("off").await, "disabled", "an operator's disable stands");
    assert_eq!(off.request_count(), 0, "a channel an operator disabled is not probed");
    cp.shutdown().await;
}

#[tokio::test]
async fn one_clients_failing_requests_never_take_a_shared_channel_offline() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    let a_id = gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;

    // One tenant's requests that the upstream answers 500, many times over.
    a.fail_next(500, 12);
    for _ in 0..12 {
        assert_eq!(reply_text(&gw.chat(0, false).await), "reply from b");
    }
    assert_eq!(a.request_count(), 12, "each request tried a once, then b");
    assert_eq!(gw.channel_status(&a_id).await, "enabled", "one client cannot disable a shared channel");
    assert_eq!(reply_text(&gw.chat(0, false).await), "reply from a");
}

#[tokio::test]
async fn an_upstream_429_cools_a_channel_down_but_never_disables_it() {
    let gw = Gateway::start(1).await;
    let (a, b) = (upstream("a").await, upstream("b").await);
    let a_id = gw.channel("a", &a.base_url(), 10, &[]).await;
    gw.channel("b", &b.base_url(), 0, &[]).await;
    gw.synced().await;

    a.fail_next(429, 1);
    assert_eq!(reply_text(&gw.chat(0, false).await), "reply from b");
    // Cooling down: the next requests go to b while a waits out its backoff.
    for _ in 0..3 {
        assert_eq!(reply_text(&gw.chat(0, false).await), "reply from b");
    }
    assert_eq!(a.request_count(), 1, "a cooling channel is not tried while another is up");
    // The cool-down (1 s without a Retry-After) ends and a serves again.
    eventually("a to serve again after its cool-down", Duration::from_secs(5), || async {
        (reply_text(&gw.chat(0, false).await) == "reply from a").then_some(())
    })
    .await;
    assert_eq!(gw.channel_status(&a_id).await, "enabled", "a 429 never disables a channel");
}
