//! Channel key pools and conversation affinity end to end: requests spread
//! over a channel's keys, a key the upstream refuses is disabled alone (and
//! the control plane persists it), a throttled key cools down while the
//! request succeeds on another, a channel whose keys are all refused is
//! unavailable, one conversation stays on one key and moves when it is
//! disabled, every way of naming a conversation is honoured, and pool keys
//! are sealed at rest and never shown. Real Redis, the control plane and
//! data planes in-process, a mock upstream that records the key it got.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use gw_control_plane::domain::secrets::{Keyring, MasterKey, sealed_with};
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, Mode, eventually},
    mock::upstream::{MockUpstream, Recorded, Script},
    redis::RedisServer,
};
use serde_json::{Value, json};
use support::{Gateway, MODEL, UPSTREAM_KEY, chat_body};

const SECOND_KEY: &str = "sk-pool-second-key-aaaa1111";
const THIRD_KEY: &str = "sk-pool-third-key-bbbb2222";

/// A channel on `upstream` holding `UPSTREAM_KEY` (`k_0`) and the two
/// pool keys; its id and the ids of the added keys.
async fn pooled_channel(gw: &Gateway, upstream: &MockUpstream) -> (String, [String; 2]) {
    let id = gw.channel("pool", &upstream.base_url(), 0, &[]).await;
    let mut ids = Vec::new();
    for key in [SECOND_KEY, THIRD_KEY] {
        let request = pb::AddChannelKeyRequest { channel_id: id.clone(), key: key.into() };
        ids.push(gw.admin().add_channel_key(request).await.expect("add key").into_inner().id);
    }
    gw.synced().await;
    (id, [ids[0].clone(), ids[1].clone()])
}

/// A header name and its value.
type Header = (&'static str, &'static str);

/// The key a recorded request was sent with.
fn key_of(request: &Recorded) -> String {
    request.header("authorization").unwrap_or_default().trim_start_matches("Bearer ").to_owned()
}

/// The keys of the chat requests `upstream` received after the first `from`.
fn keys_since(upstream: &MockUpstream, from: usize) -> Vec<String> {
    upstream.requests()[from..].iter().filter(|r| r.path == "/v1/chat/completions").map(key_of).collect()
}

/// Status of every key of channel `id`, by key id.
async fn key_statuses(gw: &Gateway, id: &str) -> BTreeMap<String, String> {
    let keys = gw.admin().list_channel_keys(pb::GetRequest { id: id.into() }).await.expect("list keys").into_inner();
    keys.items.into_iter().map(|k| (k.id, k.status)).collect()
}

fn assert_ok(reply: &support::Reply) {
    assert_eq!(reply.status, 200, "{}", reply.text);
}

#[tokio::test]
async fn requests_spread_over_the_keys_of_a_channel() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    pooled_channel(&gw, &upstream).await;
    for _ in 0..9 {
        assert_ok(&gw.chat(0, false).await);
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for key in keys_since(&upstream, 0) {
        *counts.entry(key).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> =
        [(UPSTREAM_KEY.to_owned(), 3), (SECOND_KEY.to_owned(), 3), (THIRD_KEY.to_owned(), 3)].into();
    assert_eq!(counts, expected, "round-robin over the three keys");
}

#[tokio::test]
async fn a_refused_key_is_disabled_alone_and_the_others_keep_serving() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script { refused_keys: vec![SECOND_KEY.into()], ..Script::default() });
    let (id, [second, third]) = pooled_channel(&gw, &upstream).await;

    for _ in 0..6 {
        assert_ok(&gw.chat(0, false).await);
    }
    assert!(keys_since(&upstream, 0).contains(&SECOND_KEY.to_owned()), "the refused key was tried");
    let statuses = eventually("the refused key to be auto-disabled", Duration::from_secs(10), || async {
        let statuses = key_statuses(&gw, &id).await;
        (statuses[&second] == "auto_disabled").then_some(statuses)
    })
    .await;
    assert_eq!((statuses["k_0"].as_str(), statuses[&third].as_str()), ("enabled", "enabled"));
    assert_eq!(gw.channel_status(&id).await, "enabled", "the channel stays up");

    let listed = gw.cluster.gwctl(&["channel", "key", "list", "pool"]).await.expect("gwctl channel key list");
    let refused = listed["items"].as_array().unwrap().iter().find(|k| k["id"] == second.as_str()).cloned().unwrap();
    assert_eq!(refused["status"], "auto_disabled");
    assert_eq!(refused["disabled_reason"], "upstream answered 401");
    assert!(!listed.to_string().contains(SECOND_KEY), "{listed}");

    gw.synced().await;
    let seen = upstream.request_count();
    for _ in 0..6 {
        assert_ok(&gw.chat(0, false).await);
    }
    assert!(!keys_since(&upstream, seen).contains(&SECOND_KEY.to_owned()), "a disabled key is not used");
}

#[tokio::test]
async fn a_throttled_key_cools_down_and_the_request_succeeds_on_another() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    upstream.set_script(Script { throttled_keys: vec![(THIRD_KEY.into(), "120".into())], ..Script::default() });
    let (id, [_, third]) = pooled_channel(&gw, &upstream).await;

    for _ in 0..3 {
        assert_ok(&gw.chat(0, false).await);
    }
    let used = keys_since(&upstream, 0);
    let throttled_at = used.iter().position(|k| k == THIRD_KEY).expect("round-robin reaches the third key");
    let seen = upstream.request_count();
    for _ in 0..6 {
        assert_ok(&gw.chat(0, false).await);
    }
    assert!(!keys_since(&upstream, seen).contains(&THIRD_KEY.to_owned()), "the key cools down for its Retry-After");
    assert!(throttled_at < used.len() - 1, "the throttled request went on to another key: {used:?}");
    assert_eq!(key_statuses(&gw, &id).await[&third], "enabled", "a cool-down is local and passes");
    assert_eq!(gw.channel_status(&id).await, "enabled");
}

#[tokio::test]
async fn a_channel_whose_keys_are_all_refused_is_unavailable() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let all = vec![UPSTREAM_KEY.to_owned(), SECOND_KEY.to_owned(), THIRD_KEY.to_owned()];
    upstream.set_script(Script { refused_keys: all, ..Script::default() });
    let (id, _) = pooled_channel(&gw, &upstream).await;

    let first = gw.chat(0, false).await;
    assert_eq!(first.status, 401, "{}", first.text);
    assert!(!first.text.contains("sk-"), "{}", first.text);
    eventually("every key to be auto-disabled", Duration::from_secs(10), || async {
        key_statuses(&gw, &id).await.values().all(|s| s == "auto_disabled").then_some(())
    })
    .await;
    gw.synced().await;
    let seen = upstream.request_count();
    let reply = gw.chat(0, false).await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.starts_with(&format!("分组 default 下模型 {MODEL} 无可用渠道")), "{message}");
    assert_eq!(upstream.request_count(), seen, "nothing was sent upstream");
}

#[tokio::test]
async fn a_conversation_stays_on_one_key_and_moves_when_it_is_disabled() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let (id, [second, third]) = pooled_channel(&gw, &upstream).await;
    let key_ids: BTreeMap<&str, String> =
        [(UPSTREAM_KEY, "k_0".to_owned()), (SECOND_KEY, second), (THIRD_KEY, third)].into();
    let body =
        json!({ "model": MODEL, "messages": [{ "role": "user", "content": "hi" }], "prompt_cache_key": "conv-1" });

    for _ in 0..6 {
        assert_ok(&gw.post(0, "/v1/chat/completions", Some(&gw.key), &body).await);
    }
    let used = keys_since(&upstream, 0);
    assert!(used.iter().all(|k| *k == used[0]), "one conversation, one key: {used:?}");

    let bound = key_ids[used[0].as_str()].clone();
    let update = pb::UpdateChannelKeyRequest { channel_id: id, key_id: bound, status: "disabled".into() };
    gw.admin().update_channel_key(update).await.expect("disable key");
    gw.synced().await;

    let seen = upstream.request_count();
    for _ in 0..6 {
        assert_ok(&gw.post(0, "/v1/chat/completions", Some(&gw.key), &body).await);
    }
    let moved = keys_since(&upstream, seen);
    assert_ne!(moved[0], used[0], "the conversation moved off the disabled key");
    assert!(moved.iter().all(|k| *k == moved[0]), "and stays on its new key: {moved:?}");
}

#[tokio::test]
async fn every_way_of_naming_a_conversation_is_honoured() {
    let gw = Gateway::start(1).await;
    let upstream = MockUpstream::start().await.expect("mock upstream");
    pooled_channel(&gw, &upstream).await;
    let chat = |extra: Value| {
        let mut body = chat_body(false);
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let url = format!("http://{}/v1/chat/completions", gw.cluster.data_planes[0].addr);
    let kinds: [(&str, Value, Option<Header>); 4] = [
        ("prompt_cache_key", chat(json!({ "prompt_cache_key": "pck-1" })), None),
        ("codex session_id", chat(json!({})), Some(("session_id", "codex-1"))),
        ("claude code session", chat(json!({})), Some(("x-claude-code-session-id", "claude-1"))),
        ("user", chat(json!({ "user": "user-1" })), None),
    ];
    for (kind, body, header) in kinds {
        let seen = upstream.request_count();
        for _ in 0..6 {
            let mut request = gw.cluster.http().post(&url).bearer_auth(&gw.key).json(&body);
            if let Some((name, value)) = header {
                request = request.header(name, value);
            }
            let response = request.send().await.expect("chat request");
            assert_eq!(response.status(), 200, "{kind}");
        }
        let used = keys_since(&upstream, seen);
        assert_eq!(used.len(), 6, "{kind}");
        assert!(used.iter().all(|k| *k == used[0]), "{kind}: one key for the conversation: {used:?}");
    }
    // Without a conversation the same six requests spread.
    let seen = upstream.request_count();
    for _ in 0..6 {
        assert_ok(&gw.chat(0, false).await);
    }
    let spread = keys_since(&upstream, seen);
    assert!(spread.iter().any(|k| *k != spread[0]), "requests without a conversation spread: {spread:?}");
}

#[tokio::test]
async fn pool_keys_are_sealed_at_rest_and_never_shown() {
    let redis = RedisServer::start().await.expect("redis-server");
    let master = MasterKey::parse(&hex::encode([7u8; 32])).expect("master key");
    let cluster = Cluster::start_with(Mode::InProcess, &redis.url(), 1, |cp| {
        cp.master_keys = Keyring::new(Some(master.clone()), vec![]);
    })
    .await
    .expect("cluster");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let mut admin = cluster.admin();
    let channel = gw_tests::seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("seed");
    let added = pb::AddChannelKeyRequest { channel_id: channel.clone(), key: SECOND_KEY.into() };
    let added = admin.add_channel_key(added).await.expect("add key").into_inner();
    assert!(added.key.is_empty() && SECOND_KEY.starts_with(&added.prefix), "{added:?}");

    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let raw: String = redis::cmd("HGET").arg("{gw}:channel").arg(&channel).query_async(&mut conn).await.expect("HGET");
    assert!(!raw.contains(SECOND_KEY) && !raw.contains(gw_tests::seed::UPSTREAM_KEY), "plain key at rest: {raw}");
    let stored: Value = serde_json::from_str(&raw).expect("channel JSON");
    let sealed = stored["keys"][1]["key"].as_str().expect("second pool key").to_owned();
    assert_eq!(sealed_with(&sealed), Some(master.id()));
    let ring = Keyring::new(Some(master), vec![]);
    assert_eq!(ring.open(&format!("{channel}/{}", added.id), &sealed).expect("opens"), SECOND_KEY);
    assert!(ring.open(&format!("{channel}/k_0"), &sealed).is_err(), "the seal is bound to its key id");

    let shown = [
        format!("{:?}", admin.get_channel(pb::GetRequest { id: channel.clone() }).await.expect("get").into_inner()),
        format!("{:?}", admin.list_channels(pb::ListRequest::default()).await.expect("list").into_inner()),
        format!(
            "{:?}",
            admin.list_channel_keys(pb::GetRequest { id: channel.clone() }).await.expect("keys").into_inner()
        ),
        cluster.gwctl(&["channel", "key", "list", &channel]).await.expect("gwctl keys").to_string(),
        cluster.gwctl(&["channel", "get", &channel]).await.expect("gwctl get").to_string(),
    ];
    for text in shown {
        assert!(!text.contains(SECOND_KEY) && !text.contains(gw_tests::seed::UPSTREAM_KEY), "{text}");
    }

    // Requests still reach the upstream with the plain pool key.
    let update = pb::UpdateChannelKeyRequest { channel_id: channel, key_id: "k_0".into(), status: "disabled".into() };
    admin.update_channel_key(update).await.expect("disable the first key");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        unlimited: true,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account, unlimited: true, ..Default::default() };
    let token = admin.create_token(token).await.expect("token").into_inner().key;
    let url = format!("{}/chat/completions", cluster.base_url(0));
    eventually("a request on the second key", Duration::from_secs(15), || async {
        let response = cluster.http().post(&url).bearer_auth(&token).json(&chat_body(false)).send().await.ok()?;
        let last = upstream.last_request()?;
        (response.status().is_success() && key_of(&last) == SECOND_KEY).then_some(())
    })
    .await;
}
