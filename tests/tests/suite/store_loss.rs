//! Losing Redis is not losing the fleet: a Redis that restarts with its data
//! is used again within seconds; one that comes back empty is never pushed
//! to the data planes (they keep serving, and keep their saved snapshot)
//! until an operator confirms it, and once confirmed empty nothing is priced
//! from the catalogue it lost; a store that keeps nothing on disk is
//! refused at start when the operator asks for that.

use std::time::{Duration, Instant};

use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    mock::upstream::MockUpstream,
    redis::RedisServer,
    seed,
};
use serde_json::json;

struct Fixture {
    cluster: Cluster,
    _upstream: MockUpstream,
    token: String,
    key: String,
    redis: RedisServer,
}

/// A cluster on `redis` with one data plane, `gpt-4o` on the mock upstream
/// and one token (quota $5) of an account holding $100.
async fn setup(redis: RedisServer) -> Fixture {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), 1).await.expect("cluster");
    let mut admin = cluster.admin();
    seed::chat_model(&mut admin, &upstream.base_url(), &["default"]).await.expect("model and channel");
    let account = pb::CreateAccountRequest {
        name: "acme".into(),
        balance_micros: 100_000_000,
        groups: vec!["default".into()],
        ..Default::default()
    };
    let account = admin.create_account(account).await.expect("account create").into_inner().id;
    let token = pb::CreateTokenRequest {
        account_id: account,
        group: "default".into(),
        quota_micros: 5_000_000,
        ..Default::default()
    };
    let created = admin.create_token(token).await.expect("token create").into_inner();
    let fixture =
        Fixture { cluster, _upstream: upstream, token: created.token.unwrap_or_default().id, key: created.key, redis };
    eventually("the data plane to serve the token", Duration::from_secs(10), || async {
        (chat(&fixture).await == 200).then_some(())
    })
    .await;
    fixture
}

/// One chat request through the data plane; its status.
async fn chat(f: &Fixture) -> u16 {
    let body = json!({"model": "gpt-4o", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", f.cluster.base_url(0));
    match f.cluster.http().post(url).bearer_auth(&f.key).json(&body).send().await {
        Ok(response) => response.status().as_u16(),
        Err(_) => 0,
    }
}

/// Usage records of the fixture's token in the store.
async fn usage_records(f: &Fixture) -> Option<usize> {
    let request = pb::ListUsageRequest { token_id: f.token.clone(), limit: 10_000, ..Default::default() };
    Some(f.cluster.admin().list_usage(request).await.ok()?.into_inner().items.len())
}

/// The revision and store lineage of the data plane's saved snapshot.
fn saved_snapshot(f: &Fixture) -> Option<(u64, String)> {
    gw_data_plane::saved_snapshot(&f.cluster.data_planes[0].data_dir, &f.cluster.node_key).expect("the saved snapshot")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_with_its_data_serves_admin_and_usage_again_within_seconds() {
    let redis = RedisServer::start_persistent().await.expect("redis-server");
    let mut f = setup(redis).await;
    let mut ok = 1;
    for _ in 0..5 {
        ok += usize::from(chat(&f).await == 200);
    }

    f.redis.stop().await.expect("stop redis");
    // The data plane keeps answering from its leases and allowance while
    // Redis is gone; every answer it gives is billed later.
    for _ in 0..5 {
        ok += usize::from(chat(&f).await == 200);
    }
    f.redis.restart().await.expect("restart redis");
    let back = Instant::now();
    eventually("the admin API to answer again", Duration::from_secs(10), || async {
        f.cluster.admin().list_accounts(pb::ListRequest::default()).await.ok().map(|_| ())
    })
    .await;
    eprintln!("admin API answered {:?} after Redis came back", back.elapsed());
    for _ in 0..5 {
        ok += usize::from(chat(&f).await == 200);
    }
    let records = eventually("every answered request to be billed", Duration::from_secs(20), || async {
        usage_records(&f).await.filter(|n| *n == ok)
    })
    .await;
    eprintln!("usage applied for all {records} answers {:?} after Redis came back", back.elapsed());

    let status = f.cluster.gwctl(&["store", "status"]).await.expect("gwctl store status");
    assert_eq!(status["persistence"], "aof", "{status}");
    assert!(status["suspect"].is_null(), "a restart with the data is not a loss: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_back_without_its_data_is_not_pushed_to_data_planes_until_confirmed() {
    let redis = RedisServer::start().await.expect("redis-server");
    let mut f = setup(redis).await;
    let before = f.cluster.gwctl(&["store", "status"]).await.expect("gwctl store status");
    assert_eq!(before["persistence"], "none", "{before}");
    eventually("the first answer to be billed", Duration::from_secs(10), || async {
        usage_records(&f).await.filter(|n| *n == 1)
    })
    .await;
    let revision = before["revision"].as_u64().expect("a revision");
    let lineage = before["store_id"].as_str().expect("a lineage").to_owned();
    let saved = eventually("the data plane to save the newest snapshot", Duration::from_secs(10), || async {
        saved_snapshot(&f).filter(|saved| *saved == (revision, lineage.clone()))
    })
    .await;

    f.redis.restart_empty().await.expect("restart redis empty");
    let status = eventually("the control plane to distrust the store", Duration::from_secs(15), || async {
        let status = f.cluster.gwctl(&["store", "status"]).await.ok()?;
        status["suspect"].is_string().then_some(status)
    })
    .await;
    assert_ne!(status["store_id"], before["store_id"], "an empty Redis has a new lineage: {status}");
    assert_eq!(status["confirmed"], false);

    // The data plane keeps serving what it had, and keeps it on disk, also
    // across its own restart.
    for _ in 0..3 {
        assert_eq!(chat(&f).await, 200, "the key was refused after Redis lost its data");
    }
    f.cluster.stop_data_plane(0).await;
    assert_eq!(saved_snapshot(&f).as_ref(), Some(&saved), "the saved snapshot was overwritten by the empty store");
    f.cluster.start_data_plane(0).await.expect("restart the data plane");
    assert_eq!(chat(&f).await, 200, "a restarted data plane serves its saved snapshot");
    assert_eq!(saved_snapshot(&f).as_ref(), Some(&saved), "the saved snapshot was overwritten by the empty store");

    // Usage of the meantime waits in the spool: the store takes none.
    let refused = f.cluster.admin().list_usage(pb::ListUsageRequest::default()).await.expect("usage list");
    assert!(refused.into_inner().items.is_empty(), "usage was applied to the empty store");

    let confirmed = f.cluster.gwctl(&["store", "confirm", "--yes"]).await.expect("gwctl store confirm");
    assert_eq!(confirmed["confirmed"], true, "{confirmed}");
    assert!(confirmed["suspect"].is_null(), "{confirmed}");
    eventually("the data plane to take the confirmed (empty) store", Duration::from_secs(15), || async {
        (chat(&f).await == 401).then_some(())
    })
    .await;
    let confirmed_lineage = confirmed["store_id"].as_str().expect("a lineage").to_owned();
    eventually("the data plane to save the confirmed store", Duration::from_secs(10), || async {
        saved_snapshot(&f).filter(|(_, lineage)| *lineage == confirmed_lineage)
    })
    .await;
}

/// Usage reported after a store was confirmed empty is priced from its new
/// catalogue only: a record of a model it no longer has is refused, not
/// priced from what the control plane read before the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_confirmed_empty_never_prices_from_the_catalogue_it_lost() {
    let redis = RedisServer::start().await.expect("redis-server");
    let mut f = setup(redis).await;
    eventually("the first answer to be billed", Duration::from_secs(10), || async {
        usage_records(&f).await.filter(|n| *n == 1)
    })
    .await;
    f.redis.restart_empty().await.expect("restart redis empty");
    eventually("the control plane to distrust the store", Duration::from_secs(15), || async {
        let status = f.cluster.gwctl(&["store", "status"]).await.ok()?;
        status["suspect"].is_string().then_some(())
    })
    .await;
    f.cluster.gwctl(&["store", "confirm", "--yes"]).await.expect("gwctl store confirm");

    // A customer of the new store, billed for the old store's model.
    let mut admin = f.cluster.admin();
    let group = pb::Group { name: "default".into(), ratio: 1.0, ..Default::default() };
    admin.create_group(group).await.expect("group");
    let account = pb::CreateAccountRequest { name: "new".into(), balance_micros: 1_000_000, ..Default::default() };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account.clone(), unlimited: true, ..Default::default() };
    let token = admin.create_token(token).await.expect("token").into_inner().token.expect("token").id;
    let record = pb::UsageRecord {
        request_id: "after-the-loss".into(),
        token_id: token.clone(),
        account_id: account.clone(),
        group: "default".into(),
        model: "gpt-4o".into(),
        endpoint: "/v1/chat/completions".into(),
        prompt_tokens: 1_000,
        completion_tokens: 500,
        status: 200,
        created_at: i64::try_from(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs(),
        )
        .expect("seconds"),
        node_id: "dp-0".into(),
        ..Default::default()
    };
    let (mut policy, _session) = gw_tests::node::connect(&f.cluster, "dp-0").await;
    let request = pb::ReportUsageRequest { node_id: "dp-0".into(), records: vec![record] };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.refused), (0, 1), "priced from a catalogue the store no longer has");
    let account = admin.get_account(pb::GetRequest { id: account }).await.expect("account").into_inner();
    assert_eq!(account.balance_micros, 1_000_000);
}

#[tokio::test]
async fn gwctl_store_confirm_asks_before_it_acts() {
    let redis = RedisServer::start().await.expect("redis-server");
    let cluster = Cluster::start(&redis.url(), 0).await.expect("cluster");
    let before = cluster.gwctl(&["store", "status"]).await.expect("status");
    let output = cluster.gwctl_raw(&["store", "confirm"]).await.expect("gwctl");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--yes"));
    let after = cluster.gwctl(&["store", "status"]).await.expect("status");
    assert_eq!(after["store_id"], before["store_id"], "confirm without --yes changed the lineage");
}

#[tokio::test]
async fn a_store_without_persistence_is_refused_at_start_when_required() {
    let redis = RedisServer::start().await.expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = gw_control_plane::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
    config.store = redis.url();
    config.require_store_persistence = true;
    let error = gw_control_plane::start(config.clone()).await.err().expect("start must fail");
    assert!(format!("{error:#}").contains("keeps nothing on disk"), "{error:#}");

    let persistent = RedisServer::start_persistent().await.expect("redis-server");
    config.store = persistent.url();
    let handle = gw_control_plane::start(config).await.expect("a persistent redis is accepted");
    handle.shutdown().await;
}

/// A Redis that may evict keys when full (any `maxmemory-policy` but
/// `noeviction`) would drop what keeps usage applied once: the control plane
/// refuses it at start, naming the policy, and takes it once it is fixed.
#[tokio::test]
async fn a_redis_that_may_evict_keys_is_refused_at_start() {
    let redis = RedisServer::start().await.expect("redis-server");
    let set_policy = |policy: &'static str| {
        let url = redis.url();
        async move {
            let client = redis::Client::open(url).expect("redis client");
            let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
            let (): () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy)
                .query_async(&mut conn)
                .await
                .expect("CONFIG SET");
        }
    };
    set_policy("allkeys-lru").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = gw_control_plane::Config::new(([127, 0, 0, 1], 0).into(), dir.path());
    config.store = redis.url();
    let error = gw_control_plane::start(config.clone()).await.err().expect("start must fail");
    assert!(format!("{error:#}").contains("maxmemory-policy is allkeys-lru"), "{error:#}");

    set_policy("noeviction").await;
    let handle = gw_control_plane::start(config).await.expect("a redis that never evicts is accepted");
    handle.shutdown().await;
}
