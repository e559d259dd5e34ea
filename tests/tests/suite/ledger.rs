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

use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    node::{self, Policy, Session},
    redis::RedisServer,
};

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

/// `PolicyService` as data plane `dp-forger` reaches it, with the node key
/// and a watch session open on its connection.
async fn policy(cluster: &Cluster) -> (Policy, Session) {
    node::connect(cluster, "dp-forger").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_prices_records_itself_and_refuses_forged_unknown_and_stale_ones() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let mut admin = cluster.admin();
    let (mut policy, _session) = policy(&cluster).await;
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
    let (mut policy, _session) = policy(&cluster).await;

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

    // Forged records among good ones in one batch are each judged on
    // their own, whatever passed just before them.
    let mixed = vec![
        record("good-1", &token, &account),
        record("crossed-after-good", &other_token, &account),
        record("good-2", &token, &account),
        record("ghost-after-good", "tok_nobody", &account),
        record("good-3", &token, &account),
        pb::UsageRecord { model: "unpriced".into(), ..record("unknown-model-after-good", &token, &account) },
    ];
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: mixed };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.refused), (3, 3), "{answer:?}");
    let payer = admin.get_account(pb::GetRequest { id: account }).await.expect("account").into_inner();
    assert_eq!(payer.used_micros, 4 * 2_000, "the record booked elsewhere and three good ones: {payer:?}");
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
    // Reports of `dp-0` and `dp-1` over connections of their own watch
    // sessions, and a connection with no watch.
    let (mut first, _first) = node::connect(&cluster, "dp-0").await;
    let (mut second, _second) = node::connect(&cluster, "dp-1").await;
    let mut unbound = node::unbound(&cluster);
    let report = async |policy: &mut Policy, node: &str| {
        let failure = pb::ChannelFailure {
            channel_id: channel.clone(),
            consecutive_failures: 100,
            last_status: 500,
            reason: "forged".into(),
            ..Default::default()
        };
        let request = pb::ChannelHealthRequest { node_id: node.into(), failures: vec![failure] };
        policy.report_channel_health(request).await.map(|answer| answer.into_inner().disabled)
    };
    let status = async |admin: &mut gw_tests::harness::Admin| {
        admin.get_channel(pb::GetRequest { id: channel.clone() }).await.expect("channel").into_inner().status
    };
    assert!(report(&mut first, "dp-0").await.expect("report").is_empty(), "one data plane of two disabled it");
    assert!(report(&mut first, "dp-0").await.expect("report").is_empty(), "the same data plane again");
    let posing = report(&mut first, "dp-1").await.expect_err("dp-0 reported as dp-1");
    assert_eq!(posing.code(), tonic::Code::PermissionDenied, "{posing:?}");
    let nobody = report(&mut unbound, "dp-forger").await.expect_err("a node no stream is open for had a say");
    assert_eq!(nobody.code(), tonic::Code::FailedPrecondition, "{nobody:?}");
    assert_eq!(status(&mut admin).await, "enabled");
    let agreed = report(&mut second, "dp-1").await.expect("report");
    assert_eq!(agreed, std::slice::from_ref(&channel), "two data planes agree");
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
    let (mut policy, _session) = policy(&cluster).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_key_cannot_bill_a_group_model_or_channel_the_policy_never_allowed() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let mut admin = cluster.admin();
    admin.create_group(pb::Group { name: "vip".into(), ratio: 1.0, ..Default::default() }).await.expect("group");
    let other = pb::Model { id: "other".into(), category: "chat".into(), input_price_micros: 1, ..Default::default() };
    admin.create_model(other).await.expect("model");
    let mut channel = async |name: &str, group: &str| {
        let channel = pb::Channel {
            name: name.into(),
            r#type: "openai".into(),
            base_url: "http://127.0.0.1:9".into(),
            api_key: "sk-upstream".into(),
            has_key: true,
            models: vec!["priced".into()],
            groups: vec![group.into()],
            weight: 1,
            ..Default::default()
        };
        admin.create_channel(channel).await.expect("channel").into_inner().id
    };
    let (main, vip, changing, leaving, gone) = (
        channel("main", "default").await,
        channel("vip", "vip").await,
        channel("changing", "default").await,
        channel("leaving", "default").await,
        channel("gone", "default").await,
    );
    // An account that could use `vip` when its token was made, and no more.
    let request = pb::CreateAccountRequest {
        name: "restricted".into(),
        balance_micros: 10_000_000,
        groups: vec!["default".into(), "vip".into()],
        ..Default::default()
    };
    let restricted = admin.create_account(request).await.expect("account").into_inner().id;
    let request = pb::CreateTokenRequest {
        account_id: restricted.clone(),
        group: "vip".into(),
        unlimited: true,
        ..Default::default()
    };
    let restricted_token = admin.create_token(request).await.expect("token").into_inner().token.expect("token").id;
    let request = pb::UpdateAccountRequest {
        id: restricted.clone(),
        set_groups: true,
        groups: vec!["default".into()],
        ..Default::default()
    };
    admin.update_account(request).await.expect("account update");
    admin.delete_channel(pb::GetRequest { id: gone.clone() }).await.expect("channel delete");

    // A data plane holding the store as it is now (a full snapshot could
    // come from a copy trailing the store by the last writes).
    let revision = admin.get_store_status(pb::Empty {}).await.expect("store status").into_inner().revision;
    let (mut policy, _session) = node::connect_holding(&cluster, "dp-forger", revision).await;
    // After the data plane's session began: a channel stops serving the
    // model, another is deleted. Records it admitted before still stand.
    let request = pb::UpdateChannelRequest {
        id: changing.clone(),
        set_models: true,
        models: vec!["other".into()],
        ..Default::default()
    };
    admin.update_channel(request).await.expect("channel update");
    admin.delete_channel(pb::GetRequest { id: leaving.clone() }).await.expect("channel delete");

    let on = |id: &str, channel: &str, group: &str, model: &str| pb::UsageRecord {
        channel_id: channel.into(),
        group: group.into(),
        model: model.into(),
        ..record(id, &token, &account)
    };
    let forged = vec![
        on("not-the-tokens-group", &vip, "vip", "priced"),
        on("no-such-channel", "ch_nobody", "default", "priced"),
        on("deleted-before-the-session", &gone, "default", "priced"),
        on("model-not-on-the-channel", &main, "default", "other"),
        on("group-not-on-the-channel", &vip, "default", "priced"),
        pb::UsageRecord {
            channel_id: vip.clone(),
            group: "vip".into(),
            ..record("group-the-account-may-not-use", &restricted_token, &restricted)
        },
    ];
    let count = u32::try_from(forged.len()).expect("a count");
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: forged };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.refused), (0, count), "{answer:?}");
    for id in [account.clone(), restricted] {
        let account = admin.get_account(pb::GetRequest { id }).await.expect("account").into_inner();
        assert_eq!((account.balance_micros, account.used_micros), (10_000_000, 0), "{account:?}");
    }

    let admitted = vec![
        on("served", &main, "default", "priced"),
        on("model-taken-off-since", &changing, "default", "priced"),
        on("channel-deleted-since", &leaving, "default", "priced"),
        on("no-channel-named", "", "default", "priced"),
    ];
    let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records: admitted };
    let answer = policy.report_usage(request).await.expect("report").into_inner();
    assert_eq!((answer.applied, answer.refused), (4, 0), "{answer:?}");
    let account = admin.get_account(pb::GetRequest { id: account }).await.expect("account").into_inner();
    assert_eq!(account.used_micros, 4 * 2_000, "{account:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_from_the_node_whose_watch_holds_its_connection() {
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let (mut policy, session) = policy(&cluster).await;
    let report = async |policy: &mut Policy, node: &str, id: &str| {
        let request = pb::ReportUsageRequest { node_id: node.into(), records: vec![record(id, &token, &account)] };
        policy.report_usage(request).await.map(|answer| answer.into_inner().applied)
    };

    let posing = report(&mut policy, "dp-other", "posing").await.expect_err("reported as another node");
    assert_eq!(posing.code(), tonic::Code::PermissionDenied, "{posing:?}");
    let mut unbound = node::unbound(&cluster);
    let nobody = report(&mut unbound, "dp-forger", "no-watch").await.expect_err("reported with no watch");
    assert_eq!(nobody.code(), tonic::Code::FailedPrecondition, "{nobody:?}");
    assert_eq!(report(&mut policy, "dp-forger", "honest").await.expect("report"), 1);

    // Once its watch closes, its connection reports for nobody (asked with
    // a record the ledger would refuse anyway).
    drop(session);
    eventually("the closed watch to unbind its connection", Duration::from_secs(20), || {
        let mut policy = policy.clone();
        async move {
            let records = vec![record("after-the-watch", "tok_nobody", "acc_nobody")];
            let request = pb::ReportUsageRequest { node_id: "dp-forger".into(), records };
            let refused = policy.report_usage(request).await.err()?;
            (refused.code() == tonic::Code::FailedPrecondition).then_some(())
        }
    })
    .await;
    let usage = cluster.admin().list_usage(pb::ListUsageRequest::default()).await.expect("usage").into_inner().items;
    let ids: Vec<&str> = usage.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["honest"]);
}

/// The marker hashes of applied request ids in `redis`.
async fn marker_hashes(redis: &RedisServer) -> usize {
    let client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg("{gw}:applied_hour:*").query_async(&mut conn).await.expect("keys");
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_markers_outlive_the_old_record_ttl_while_their_rows_are_kept() {
    use gw_control_plane::store::{RedisStore, Retention, Store, rollup::RollupStore as _};
    const DAY: i64 = 24 * 60 * 60;
    let redis = RedisServer::start().await.expect("redis-server");
    let (cluster, account, token) = setup(&redis).await;
    let store = async |usage_days| {
        let store = RedisStore::connect(&redis.url()).await.expect("store");
        store.with_retention(Retention { usage_days, usage_max_records: 0, rollup_days: 400 })
    };
    let row = |id: &str| gw_control_plane::domain::UsageRecord {
        request_id: id.into(),
        token_id: token.clone(),
        account_id: account.clone(),
        group: "default".into(),
        model: "priced".into(),
        cost_micros: 2_000,
        status: 200,
        created_at: now(),
        node_id: "dp-0".into(),
        ..Default::default()
    };
    let listed = async || {
        let usage = cluster.admin().list_usage(pb::ListUsageRequest::default()).await.expect("usage").into_inner();
        let mut ids: Vec<String> = usage.items.into_iter().map(|r| r.request_id).collect();
        ids.sort();
        ids
    };
    let used = async || {
        let request = pb::GetRequest { id: account.clone() };
        cluster.admin().get_account(request).await.expect("account").into_inner().used_micros
    };

    // Rows kept 90 days: 45 days on, past the 31 days a record's marker
    // used to live, the row is kept and so is its marker.
    let long = store(90).await;
    assert_eq!(long.apply_usage(&[row("kept")]).await.expect("apply").applied, 1);
    long.prune(now() + 45 * DAY).await.expect("prune");
    // What 45 days of expiry would have removed.
    delete_what_can_expire(&redis).await;
    assert_eq!(listed().await, ["kept"]);
    let again = long.apply_usage(&[row("kept")]).await.expect("apply");
    assert_eq!((again.applied, again.duplicates), (0, 1), "a resend after 45 days was charged again");
    assert_eq!(used().await, 2_000);

    // Rows kept a day: two days on the row is gone, but a resend could
    // still come within the idempotency window, so the marker stays.
    let short = store(1).await;
    assert_eq!(short.apply_usage(&[row("pruned")]).await.expect("apply").applied, 1);
    short.prune(now() + 2 * DAY).await.expect("prune");
    delete_what_can_expire(&redis).await;
    assert!(listed().await.is_empty(), "rows past a day's retention were kept");
    let again = short.apply_usage(&[row("pruned")]).await.expect("apply");
    assert_eq!((again.applied, again.duplicates), (0, 1), "a resend after its row was pruned was charged again");
    assert_eq!(used().await, 4_000);

    // Past both the rows' retention and the window, the markers go.
    assert!(marker_hashes(&redis).await > 0);
    long.prune(now() + 92 * DAY).await.expect("prune");
    assert_eq!(marker_hashes(&redis).await, 0, "markers outlived every row and the window");
}
