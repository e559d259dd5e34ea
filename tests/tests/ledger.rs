//! The ledger does not trust what data planes report: every record is
//! checked and priced from the catalogue, applied once per request id, and
//! a record older than the idempotency window is refused, never charged, as
//! is one naming a token that is not its account's, a token or account that
//! does not exist; a record is booked to the data plane that sent it, and
//! one data plane's channel-health report cannot disable a channel that
//! others serve.
//! Exactly-once rests on nothing Redis may expire: with every key that has
//! a lifetime deleted, a resent record is still a duplicate. Reports go
//! straight to `PolicyService` with the node key, as a data plane (or
//! someone holding its key) would send them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use gw_tests::{
    harness::{AdminKey, Cluster},
    redis::RedisServer,
};
use tonic::{service::interceptor::InterceptedService, transport::Channel, transport::Endpoint};

/// Thirty days, the idempotency window.
const WINDOW_SECS: i64 = 30 * 24 * 60 * 60;

fn now() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("seconds")
}

fn record(id: &str, token: &str, account: &str) -> pb::UsageRecord {
    pb::UsageRecord {
        request_id: id.into(),
        token_id: token.into(),
        account_id: account.into(),
        group: "default".into(),
        model: "priced".into(),
        endpoint: "/v1/chat/completions".into(),
        prompt_tokens: 1_000,
        completion_tokens: 500,
        cost_micros: 1,
        status: 200,
        created_at: now(),
        node_id: "dp-forger".into(),
        ..Default::default()
    }
}

/// A control plane on Redis with no data plane, the `priced` model and an
/// account holding $10 with an unlimited token: the cluster, the account's
/// and the token's ids.
async fn setup(redis: &RedisServer) -> (Cluster, String, String) {
    let cluster = Cluster::start(&redis.url(), 0).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = pb::Model {
        id: "priced".into(),
        category: "chat".into(),
        input_price_micros: 1_000_000,
        output_price_micros: 2_000_000,
        ..Default::default()
    };
    admin.create_model(model).await.expect("model");
    let account = pb::CreateAccountRequest { name: "payer".into(), balance_micros: 10_000_000, ..Default::default() };
    let account = admin.create_account(account).await.expect("account").into_inner().id;
    let token = pb::CreateTokenRequest { account_id: account.clone(), unlimited: true, ..Default::default() };
    let token = admin.create_token(token).await.expect("token").into_inner().token.expect("token").id;
    (cluster, account, token)
}

/// `PolicyService` as a data plane reaches it, with the node key.
fn policy(cluster: &Cluster) -> PolicyServiceClient<InterceptedService<Channel, AdminKey>> {
    let channel = Endpoint::from_shared(format!("http://{}", cluster.control_plane.addr))
        .expect("address")
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    PolicyServiceClient::with_interceptor(channel, AdminKey::new(&cluster.node_key).expect("key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_prices_records_itself_and_refuses_forged_unknown_and_stale_ones() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let mut admin = cluster.admin();
    let mut policy = policy(&cluster);
    let mut report = async |records: Vec<pb::UsageRecord>| {
        let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records };
        policy.report_usage(request).await.expect("report").into_inner()
    };

    let forged = pb::UsageRecord { cost_micros: -5_000_000, ..record("forged", &token, &account) };
    let stale = pb::UsageRecord { created_at: now() - WINDOW_SECS - 60, ..record("stale", &token, &account) };
    let unknown = pb::UsageRecord { model: "ghost".into(), ..record("unknown", &token, &account) };
    let negative = pb::UsageRecord { prompt_tokens: -1_000_000, ..record("negative", &token, &account) };
    let answer = report(vec![forged, stale, unknown, negative, record("honest", &token, &account)]).await;
    assert_eq!((answer.applied, answer.duplicates, answer.refused), (1, 0, 4));
    let again = report(vec![record("honest", &token, &account)]).await;
    assert_eq!((again.applied, again.duplicates, again.refused), (0, 1, 0), "a resend is applied once");

    let account = admin.get_account(pb::GetRequest { id: account }).await.expect("account").into_inner();
    // 1,000 in × $1/M + 500 out × $2/M = 2,000 µ$, whatever the record said.
    assert_eq!((account.balance_micros, account.used_micros), (10_000_000 - 2_000, 2_000));
    let usage = admin
        .list_usage(pb::ListUsageRequest { token_id: token, ..Default::default() })
        .await
        .expect("usage")
        .into_inner()
        .items;
    let ids: Vec<(&str, i64)> = usage.iter().map(|r| (r.request_id.as_str(), r.cost_micros)).collect();
    assert_eq!(ids, [("honest", 2_000)], "only the honest record, at the catalogue's price");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_key_cannot_move_money_between_tenants() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let mut admin = cluster.admin();
    let other = pb::CreateAccountRequest { name: "other".into(), balance_micros: 10_000_000, ..Default::default() };
    let other = admin.create_account(other).await.expect("account").into_inner().id;
    let request = pb::CreateTokenRequest { account_id: other.clone(), unlimited: true, ..Default::default() };
    let other_token = admin.create_token(request).await.expect("token").into_inner().token.expect("token").id;
    let mut policy = policy(&cluster);

    let forged = vec![
        // Account A charged through account B's token, and the reverse.
        record("crossed", &other_token, &account),
        record("crossed-back", &token, &other),
        record("ghost-token", "tok_nobody", &account),
        record("ghost-account", &token, "acc_nobody"),
    ];
    let count = u32::try_from(forged.len()).expect("a count");
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: forged };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.refused), (0, count), "{answer:?}");
    for id in [account.clone(), other] {
        let account = admin.get_account(pb::GetRequest { id }).await.expect("account").into_inner();
        assert_eq!((account.balance_micros, account.used_micros), (10_000_000, 0), "{account:?}");
    }
    let usage = admin.list_usage(pb::ListUsageRequest::default()).await.expect("usage").into_inner().items;
    assert!(usage.is_empty(), "refused records were kept: {usage:?}");

    // A record naming another data plane is booked to the one that sent it.
    let elsewhere = pb::UsageRecord { node_id: "dp-other".into(), ..record("elsewhere", &token, &account) };
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: vec![elsewhere] };
    assert_eq!(policy.report_usage(request).await.expect("report").into_inner().applied, 1);
    let usage = admin.list_usage(pb::ListUsageRequest::default()).await.expect("usage").into_inner().items;
    assert_eq!(usage.iter().map(|r| r.node_id.as_str()).collect::<Vec<_>>(), ["dp-forger"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_data_plane_of_two_cannot_disable_a_channel_fleet_wide() {
    let redis = RedisServer::start().await.expect("redis-server");
    let cluster = Cluster::start(&redis.url(), 2).await.expect("cluster");
    let mut admin = cluster.admin();
    let channel = pb::Channel {
        name: "shared".into(),
        r#type: "openai".into(),
        base_url: "http://127.0.0.1:9".into(),
        api_key: "sk-upstream-shared".into(),
        has_key: true,
        models: vec!["priced".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    let channel = admin.create_channel(channel).await.expect("channel").into_inner().id;
    let mut policy = policy(&cluster);
    let mut report = async |node: &str| {
        let failure = pb::ChannelFailure {
            channel_id: channel.clone(),
            consecutive_failures: 100,
            last_status: 500,
            reason: "forged".into(),
            ..Default::default()
        };
        let request = pb::ChannelHealthRequest { node_id: node.into(), failures: vec![failure] };
        policy.report_channel_health(request).await.expect("report").into_inner().disabled
    };
    let status = async |admin: &mut gw_tests::harness::Admin| {
        admin.get_channel(pb::GetRequest { id: channel.clone() }).await.expect("channel").into_inner().status
    };
    assert!(report("dp-0").await.is_empty(), "one data plane of two disabled the channel");
    assert!(report("dp-0").await.is_empty(), "the same data plane again");
    assert!(report("dp-forger").await.is_empty(), "a node no stream is open for has no say");
    assert_eq!(status(&mut admin).await, "enabled");
    assert_eq!(report("dp-1").await, std::slice::from_ref(&channel), "two data planes agree");
    assert_eq!(status(&mut admin).await, "auto_disabled");
}

/// Deletes every key of `redis` that has a lifetime, as expiry would in
/// time; returns how many.
async fn delete_what_can_expire(redis: &RedisServer) -> usize {
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await.expect("keys");
    let mut deleted = 0;
    for key in keys {
        let ttl: i64 = redis::cmd("TTL").arg(&key).query_async(&mut conn).await.expect("ttl");
        if ttl >= 0 {
            let () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.expect("del");
            deleted += 1;
        }
    }
    deleted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_record_is_charged_once_even_after_every_key_that_can_expire_is_gone() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let mut policy = policy(&cluster);
    let batch = vec![record("first", &token, &account), record("second", &token, &account)];
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: batch.clone() };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.duplicates), (2, 0));

    let deleted = delete_what_can_expire(&redis).await;
    println!("{deleted} keys with a lifetime deleted");
    // Each record alone, then both together: always duplicates.
    for records in [vec![batch[0].clone()], vec![batch[1].clone()], batch] {
        let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records };
        let again = policy.report_usage(request).await.expect("report").into_inner();
        assert_eq!(again.applied, 0, "a resent record was applied again: {again:?}");
    }
    let mut admin = cluster.admin();
    let account = admin.get_account(pb::GetRequest { id: account }).await.expect("account").into_inner();
    assert_eq!((account.balance_micros, account.used_micros), (10_000_000 - 4_000, 4_000), "charged once each");
    let request = pb::ListUsageRequest { token_id: token, ..Default::default() };
    let usage = admin.list_usage(request).await.expect("usage").into_inner().items;
    assert_eq!(usage.len(), 2, "one ledger row each");
}
