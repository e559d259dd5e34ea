//! Upstream keys at rest: with a master key, the Redis channel hash and the
//! embedded redb file hold only sealed keys, requests still reach the
//! upstream with the plain key, `gwctl secrets rotate` re-seals every key
//! under a new master key (after which the old key alone opens nothing and
//! a restart with the new key serves on), and an empty key is refused.

use std::{path::Path, time::Duration};

use gw_control_plane::domain::secrets::{Keyring, MasterKey, SEALED_PREFIX, sealed_with};
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, Mode, eventually},
    mock::upstream::MockUpstream,
    redis::RedisServer,
    seed::{self, UPSTREAM_KEY},
};
use serde_json::json;

fn master_key(byte: u8) -> (String, MasterKey) {
    let text = hex::encode([byte; 32]);
    let key = MasterKey::parse(&text).expect("master key");
    (text, key)
}

/// A cluster on `store` whose control plane seals with `key`.
async fn cluster(store: &str, key: MasterKey) -> Cluster {
    Cluster::start_with(Mode::InProcess, store, 1, |cp| cp.master_keys = Keyring::new(Some(key), vec![]))
        .await
        .expect("cluster")
}

/// The model, a channel holding `UPSTREAM_KEY`, an account and a token; the
/// token's key and the channel's id.
async fn populate(cluster: &Cluster, upstream: &MockUpstream) -> (String, String) {
    let mut admin = cluster.admin();
    let channel = seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("model and channel");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        unlimited: true,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account, unlimited: true, ..Default::default() };
    (admin.create_token(token).await.expect("token create").into_inner().key, channel)
}

/// Waits until a chat request through data plane 0 succeeds, and checks
/// that the upstream got the plain key.
async fn served(cluster: &Cluster, upstream: &MockUpstream, key: &str) {
    served_model(cluster, upstream, key, "gpt-4o").await;
}

/// `served`, asking for `model`.
async fn served_model(cluster: &Cluster, upstream: &MockUpstream, key: &str, model: &str) {
    let url = format!("{}/chat/completions", cluster.base_url(0));
    let body = json!({ "model": model, "messages": [{ "role": "user", "content": "hi" }] });
    eventually("a chat request to succeed", Duration::from_secs(15), || async {
        let response = cluster.http().post(&url).bearer_auth(key).json(&body).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    let request = upstream.last_request().expect("the upstream was called");
    assert_eq!(request.header("authorization"), Some(format!("Bearer {UPSTREAM_KEY}").as_str()));
}

/// The channel's key as the Redis hash holds it.
async fn raw_redis_key(redis: &RedisServer, channel: &str) -> String {
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let json: String = redis::cmd("HGET").arg("{gw}:channel").arg(channel).query_async(&mut conn).await.expect("HGET");
    assert!(!json.contains(UPSTREAM_KEY), "the Redis hash holds the plain key: {json}");
    let value: serde_json::Value = serde_json::from_str(&json).expect("channel JSON");
    assert_eq!(value["api_key"], "", "the channel's key moved into its pool");
    assert_eq!(value["keys"][0]["id"], "k_0");
    value["keys"][0]["key"].as_str().expect("pool key").to_owned()
}

/// What the seal of `channel`'s first pool key is bound to.
fn bound(channel: &str) -> String {
    format!("{channel}/k_0")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[tokio::test]
async fn the_redis_hash_holds_only_sealed_keys_and_requests_still_work() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let (_, key) = master_key(1);
    let cluster = cluster(&redis.url(), key.clone()).await;
    let (token, channel) = populate(&cluster, &upstream).await;
    let stored = raw_redis_key(&redis, &channel).await;
    assert!(stored.starts_with(SEALED_PREFIX), "{stored}");
    assert_eq!(sealed_with(&stored), Some(key.id()));
    assert_eq!(Keyring::new(Some(key), vec![]).open(&bound(&channel), &stored).expect("opens"), UPSTREAM_KEY);
    served(&cluster, &upstream, &token).await;

    // The data plane's saved snapshot is sealed too.
    let dir = &cluster.data_planes[0].data_dir;
    let found = eventually("the data plane to save its snapshot", Duration::from_secs(10), || async {
        let files: Vec<_> = std::fs::read_dir(dir).ok()?.filter_map(Result::ok).map(|e| e.path()).collect();
        let snapshot =
            files.into_iter().find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains("snapshot")))?;
        std::fs::read(&snapshot).ok().filter(|bytes| !bytes.is_empty())
    })
    .await;
    assert!(!contains(&found, UPSTREAM_KEY.as_bytes()), "the saved snapshot holds the plain key");
}

#[tokio::test]
async fn the_embedded_store_file_holds_no_plain_key_and_is_private() {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let (_, key) = master_key(2);
    let cluster = cluster("", key).await;
    let (token, _) = populate(&cluster, &upstream).await;
    served(&cluster, &upstream, &token).await;
    let data_dir = &cluster.control_plane.data_dir;
    let file = data_dir.join("store.redb");
    let bytes = std::fs::read(&file).expect("store file");
    assert!(contains(&bytes, SEALED_PREFIX.as_bytes()), "no sealed key in the store file");
    assert!(!contains(&bytes, UPSTREAM_KEY.as_bytes()), "the store file holds the plain key");
    #[cfg(unix)]
    {
        assert_eq!(mode(&file), 0o600, "store file mode");
        assert_eq!(mode(data_dir), 0o700, "data dir mode");
        assert_eq!(mode(&cluster.data_planes[0].data_dir), 0o700, "data plane dir mode");
    }
}

#[tokio::test]
async fn gwctl_secrets_rotate_reseals_every_key_and_a_restart_with_the_new_key_serves_on() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let (_, old) = master_key(3);
    let (new_text, new) = master_key(4);
    let mut cluster = cluster(&redis.url(), old.clone()).await;
    let (token, channel) = populate(&cluster, &upstream).await;
    let before = raw_redis_key(&redis, &channel).await;
    assert_eq!(sealed_with(&before), Some(old.id()));

    let key_file = cluster.dir().join("new-master.key");
    std::fs::write(&key_file, format!("{new_text}\n")).expect("key file");
    let key_path = key_file.to_string_lossy().into_owned();
    let answer = cluster.gwctl(&["secrets", "rotate", "--new-master-key-file", &key_path]).await.expect("rotate");
    assert_eq!(answer, json!({ "resealed": 1, "key_id": new.id() }));

    let after = raw_redis_key(&redis, &channel).await;
    assert_ne!(after, before);
    assert_eq!(sealed_with(&after), Some(new.id()));
    assert!(
        Keyring::new(Some(old.clone()), vec![]).open(&bound(&channel), &after).is_err(),
        "the old key still opens it"
    );
    assert_eq!(Keyring::new(Some(new.clone()), vec![]).open(&bound(&channel), &after).expect("opens"), UPSTREAM_KEY);
    served(&cluster, &upstream, &token).await;

    // A replica given only the old key refuses to start; one given the new
    // key serves on.
    cluster.stop_control_plane().await;
    cluster.control_plane.master_keys = Keyring::new(Some(old), vec![]);
    let refused = cluster.start_control_plane().await.expect_err("started with the old key alone");
    assert!(format!("{refused:#}").contains("cannot be opened"), "{refused:#}");
    cluster.control_plane.master_keys = Keyring::new(Some(new), vec![]);
    cluster.start_control_plane().await.expect("restart with the new key");
    // The channel reaches the data plane again from the restarted control
    // plane (a model added to it), with the key the new master key opened.
    let mut admin = cluster.admin();
    let mini = pb::Model { id: "gpt-4o-mini".into(), category: "chat".into(), ..Default::default() };
    admin.create_model(mini).await.expect("model create");
    let update = pb::UpdateChannelRequest {
        id: channel,
        set_models: true,
        models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
        ..Default::default()
    };
    admin.update_channel(update).await.expect("channel update");
    served_model(&cluster, &upstream, &token, "gpt-4o-mini").await;
}

#[tokio::test]
async fn replicas_rolled_to_a_new_key_with_the_old_as_previous_serve_on_and_rotate_reseals() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let (_, old) = master_key(7);
    let (_, new) = master_key(8);
    let mut cluster = cluster(&redis.url(), old.clone()).await;
    let (token, channel) = populate(&cluster, &upstream).await;

    // Step 1: the new key is current, the old one still opens.
    cluster.stop_control_plane().await;
    cluster.control_plane.master_keys = Keyring::new(Some(new.clone()), vec![old.clone()]);
    cluster.start_control_plane().await.expect("restart with both keys");
    assert_eq!(sealed_with(&raw_redis_key(&redis, &channel).await), Some(old.id()));
    served(&cluster, &upstream, &token).await;

    // Step 2: `gwctl secrets rotate` with no new key seals under the current one.
    let answer = cluster.gwctl(&["secrets", "rotate"]).await.expect("rotate");
    assert_eq!(answer, json!({ "resealed": 1, "key_id": new.id() }));
    assert_eq!(sealed_with(&raw_redis_key(&redis, &channel).await), Some(new.id()));
    let again = cluster.gwctl(&["secrets", "rotate"]).await.expect("rotate again");
    assert_eq!(again["resealed"], 0, "{again}");

    // Step 3: the old key can go.
    cluster.stop_control_plane().await;
    cluster.control_plane.master_keys = Keyring::new(Some(new), vec![]);
    cluster.start_control_plane().await.expect("restart with the new key alone");
    served(&cluster, &upstream, &token).await;
}

#[tokio::test]
async fn without_a_master_key_rotation_is_refused_and_keys_stay_as_before() {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let (token, channel) = populate(&cluster, &upstream).await;
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let json: String = redis::cmd("HGET").arg("{gw}:channel").arg(&channel).query_async(&mut conn).await.expect("HGET");
    assert!(json.contains(UPSTREAM_KEY), "without a master key the key is stored as before: {json}");
    served(&cluster, &upstream, &token).await;
    let output = cluster.gwctl_raw(&["secrets", "rotate"]).await.expect("gwctl");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no master key"), "{output:?}");
}

#[tokio::test]
async fn an_empty_upstream_key_is_refused_unless_the_channel_needs_none() {
    let (_, key) = master_key(5);
    let cluster = cluster("", key).await;
    let mut admin = cluster.admin();
    admin
        .create_model(pb::Model { id: "gpt-4o".into(), category: "chat".into(), ..Default::default() })
        .await
        .expect("model create");
    let channel = |name: &str, api_key: &str, has_key: bool| pb::Channel {
        name: name.into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: api_key.into(),
        has_key,
        models: vec!["gpt-4o".into()],
        ..Default::default()
    };
    let refused = admin.create_channel(channel("empty", "  ", true)).await.expect_err("an empty key was accepted");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");

    // gwctl: an unset variable (an empty --key) and an empty key file.
    let empty = cluster.dir().join("empty.key");
    std::fs::write(&empty, "\n").expect("empty key file");
    let base = ["channel", "create", "--name", "unset", "--base-url", "http://127.0.0.1:9/v1", "--models", "gpt-4o"];
    for key in [vec!["--key", ""], vec!["--key-file", &*empty.to_string_lossy()]] {
        let args: Vec<&str> = base.iter().copied().chain(key.iter().map(|s| &**s)).collect();
        let output = cluster.gwctl_raw(&args).await.expect("gwctl");
        assert!(!output.status.success(), "gwctl created a channel with {key:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("empty"), "{output:?}");
    }
    let listed = admin.list_channels(pb::ListRequest::default()).await.expect("list").into_inner();
    assert!(listed.items.is_empty(), "{listed:?}");

    // Saying the upstream needs none is fine.
    let args = [&base[..], &["--no-key"]].concat();
    let created = cluster.gwctl(&args).await.expect("a keyless channel");
    assert_eq!(created["name"], "unset", "{created}");
}
