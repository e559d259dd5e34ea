//! The ledger does not trust what data planes report: every record is
//! checked and priced from the catalogue, applied once per request id, and
//! a record older than the idempotency window is refused, never charged.
//! Reports go straight to `PolicyService` with the node key, as a data plane
//! (or someone holding its key) would send them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};
use gw_tests::{
    harness::{AdminKey, Cluster},
    redis::RedisServer,
};
use tonic::transport::Endpoint;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_prices_records_itself_and_refuses_forged_unknown_and_stale_ones() {
    let redis = RedisServer::start().await.expect("redis-server");
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

    let channel = Endpoint::from_shared(format!("http://{}", cluster.control_plane.addr))
        .expect("address")
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let mut policy = PolicyServiceClient::with_interceptor(channel, AdminKey::new(&cluster.node_key).expect("key"));
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
