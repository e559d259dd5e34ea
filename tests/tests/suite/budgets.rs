//! Spending caps across many data planes: four data planes on one control
//! plane and real Redis, eight concurrent clients on each, every request
//! priced at exactly $0.001. The sum admitted never passes a token's quota,
//! an account's balance or what a video may charge; without the control
//! plane a data plane spends only what its leases hold. Each test prints its
//! row of the "Spending caps across data planes" table in docs/budgets.md.

use std::time::Duration;

use futures_util::future::join_all;
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    mock::upstream::MockUpstream,
    mock::video::MockVideo,
    redis::RedisServer,
};
use serde_json::json;

const DATA_PLANES: usize = 4;
const CLIENTS_PER_PLANE: usize = 8;
/// What one chat request costs: a per-request price and no token prices.
const PRICE: i64 = 1_000;
/// How long a refused data plane remembers the refusal (`REFUSAL_MEMORY`),
/// and a margin.
const AFTER_REFUSALS: Duration = Duration::from_millis(1_200);

struct Fixture {
    cluster: Cluster,
    _upstream: MockUpstream,
    _redis: RedisServer,
}

struct Customer {
    account: String,
    token: String,
    key: String,
}

async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    MockVideo::of(&upstream);
    let cluster = Cluster::start(&redis.url(), DATA_PLANES).await.expect("cluster");
    let mut admin = cluster.admin();
    let model = |id: &str, category: &str| pb::Model { id: id.into(), category: category.into(), ..Default::default() };
    admin.create_model(pb::Model { request_price_micros: PRICE, ..model("flat", "chat") }).await.expect("model");
    admin.create_model(pb::Model { second_price_micros: 100_000, ..model("clip", "video") }).await.expect("model");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-budgets".into(),
        has_key: true,
        models: vec!["flat".into(), "clip".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    Fixture { cluster, _upstream: upstream, _redis: redis }
}

/// An account with `balance` µ$ (unlimited when `None`) and a token with
/// `quota` µ$ (unlimited when `None`), known to every data plane.
async fn customer(f: &Fixture, name: &str, balance: Option<i64>, quota: Option<i64>) -> Customer {
    let mut admin = f.cluster.admin();
    let request = pb::CreateAccountRequest {
        name: name.into(),
        balance_micros: balance.unwrap_or(0),
        unlimited: balance.is_none(),
        ..Default::default()
    };
    let account = admin.create_account(request).await.expect("account").into_inner().id;
    let request = pb::CreateTokenRequest {
        account_id: account.clone(),
        group: "default".into(),
        unlimited: quota.is_none(),
        quota_micros: quota.unwrap_or(0),
        ..Default::default()
    };
    let created = admin.create_token(request).await.expect("token").into_inner();
    let (token, key) = (created.token.expect("token").id, created.key);
    f.cluster.wait_until_served_everywhere(&key).await;
    Customer { account, token, key }
}

/// One chat request to data plane `i`: its status and error message.
async fn chat(f: &Fixture, i: usize, key: &str) -> (u16, String) {
    let body = json!({"model": "flat", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", f.cluster.base_url(i));
    let response = f.cluster.http().post(url).bearer_auth(key).json(&body).send().await.expect("chat");
    let status = response.status().as_u16();
    let json: serde_json::Value = response.json().await.unwrap_or_default();
    (status, json["error"]["message"].as_str().unwrap_or_default().to_owned())
}

/// Eight clients per data plane send until each is refused; then, once the
/// refusals are forgotten, each data plane is asked again until refused.
/// Returns the requests admitted and every refusal seen.
async fn spend_until_refused(f: &Fixture, key: &str) -> (usize, Vec<(u16, String)>) {
    let clients = (0..DATA_PLANES * CLIENTS_PER_PLANE).map(|c| async move {
        let (mut admitted, mut refusals) = (0, Vec::new());
        loop {
            let (status, message) = chat(f, c % DATA_PLANES, key).await;
            if status == 200 {
                admitted += 1;
            } else {
                refusals.push((status, message));
                return (admitted, refusals);
            }
        }
    });
    let (mut admitted, mut refusals) = (0, Vec::new());
    for (a, r) in join_all(clients).await {
        admitted += a;
        refusals.extend(r);
    }
    // Data planes refused while another held the last fragments gave theirs
    // back; what is left of the cap is admitted now.
    tokio::time::sleep(AFTER_REFUSALS).await;
    for i in 0..DATA_PLANES {
        loop {
            let (status, message) = chat(f, i, key).await;
            if status != 200 {
                refusals.push((status, message));
                break;
            }
            admitted += 1;
        }
    }
    (admitted, refusals)
}

/// The ledger's records of `token`, once there are `count` of them.
async fn ledger(f: &Fixture, token: &str, count: usize) -> Vec<pb::UsageRecord> {
    eventually(&format!("{count} usage records"), Duration::from_secs(15), || async {
        let request = pb::ListUsageRequest { token_id: token.into(), limit: 10_000, ..Default::default() };
        let records = f.cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        (records.len() == count).then_some(records)
    })
    .await
}

async fn account(f: &Fixture, id: &str) -> pb::Account {
    f.cluster.admin().get_account(pb::GetRequest { id: id.into() }).await.expect("account").into_inner()
}

fn row(setup: &str, cap: i64, admitted: i64) {
    println!(
        "| {setup} | ${:.3} | ${:.3} | ${:.3} |",
        cap as f64 / 1e6,
        admitted as f64 / 1e6,
        (admitted - cap).max(0) as f64 / 1e6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_data_planes_with_eight_clients_each_admit_exactly_a_token_quota() {
    let f = setup().await;
    let quota = 10 * PRICE;
    let c = customer(&f, "quota", Some(1_000_000), Some(quota)).await;
    let saved = f.cluster.data_planes[0].data_dir.join("snapshot.pb");
    let saved_at = || std::fs::metadata(&saved).and_then(|m| m.modified()).ok();
    // The data plane saves policy changes at most once a second.
    let before = eventually("the saved snapshot to settle", Duration::from_secs(10), || async {
        let first = saved_at()?;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        (saved_at() == Some(first)).then_some(first)
    })
    .await;
    let (admitted, refusals) = spend_until_refused(&f, &c.key).await;
    for (status, message) in &refusals {
        assert_eq!((*status, message.split(" (request id").next().unwrap_or_default()), (403, "该令牌额度已用尽"));
    }
    let records = ledger(&f, &c.token, admitted).await;
    let cost: i64 = records.iter().map(|r| r.cost_micros).sum();
    row("token quota, 4 data planes × 8 clients", quota, cost);
    assert_eq!(admitted, 10, "admitted against a quota of 10 requests");
    assert_eq!(cost, quota);
    let token = f.cluster.admin().get_token(pb::GetRequest { id: c.token.clone() }).await.expect("token").into_inner();
    assert_eq!(token.used_micros, quota, "gwctl shows the quota used");
    assert_eq!(saved_at(), Some(before), "spending rewrote the data plane's saved policy snapshot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_data_planes_with_eight_clients_each_never_overdraw_an_account() {
    let f = setup().await;
    let balance = 10 * PRICE;
    let c = customer(&f, "balance", Some(balance), None).await;
    let (admitted, refusals) = spend_until_refused(&f, &c.key).await;
    for (status, message) in &refusals {
        assert_eq!(*status, 403, "{message}");
        assert!(message.starts_with("用户额度不足, 剩余额度: ＄"), "{message}");
    }
    let records = ledger(&f, &c.token, admitted).await;
    let cost: i64 = records.iter().map(|r| r.cost_micros).sum();
    row("account balance, 4 data planes × 8 clients", balance, cost);
    assert_eq!(admitted, 10, "admitted against a balance of 10 requests");
    let account = account(&f, &c.account).await;
    assert_eq!((account.balance_micros, account.used_micros), (0, balance), "gwctl shows the balance spent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_videos_on_four_data_planes_never_overdraw_an_account() {
    let f = setup().await;
    // $0.40 a video (4 s at $0.10/s), $0.50 of balance: one fits.
    let c = customer(&f, "video", Some(500_000), None).await;
    let submissions = (0..8).map(|i| {
        let (f, key) = (&f, c.key.clone());
        async move {
            let form =
                reqwest::multipart::Form::new().text("model", "clip").text("prompt", "a cat").text("seconds", "4");
            let url = format!("{}/videos", f.cluster.base_url(i % DATA_PLANES));
            let response = f.cluster.http().post(url).bearer_auth(&key).multipart(form).send().await.expect("submit");
            response.status().as_u16()
        }
    });
    let statuses = join_all(submissions).await;
    let accepted = statuses.iter().filter(|s| **s == 200).count();
    assert!(statuses.iter().all(|s| *s == 200 || *s == 403), "{statuses:?}");
    let account = account(&f, &c.account).await;
    row("video charge, 8 at once on 4 data planes", 500_000, account.used_micros);
    assert_eq!(accepted, 1, "{statuses:?}");
    assert_eq!(account.balance_micros, 100_000, "never below zero");
}

/// Sends 5 requests to each data plane (leases are taken), stops the
/// control plane, and lets 8 clients per data plane spend until refused.
/// Returns (admitted before, admitted during the outage, ledger cost).
async fn spend_through_an_outage(f: &mut Fixture, c: &Customer) -> (usize, usize, i64) {
    let mut before = 0;
    for i in 0..DATA_PLANES {
        for _ in 0..5 {
            assert_eq!(chat(f, i, &c.key).await.0, 200);
            before += 1;
        }
    }
    f.cluster.stop_control_plane().await;
    let clients = (0..DATA_PLANES * CLIENTS_PER_PLANE).map(|n| {
        let (f, key) = (&*f, c.key.clone());
        async move {
            let mut admitted = 0;
            loop {
                let (status, message) = chat(f, n % DATA_PLANES, &key).await;
                if status != 200 {
                    assert_eq!(status, 503, "{message}");
                    return admitted;
                }
                admitted += 1;
            }
        }
    });
    let during: usize = join_all(clients).await.into_iter().sum();
    f.cluster.start_control_plane().await.expect("control plane back");
    let records = ledger(f, &c.token, before + during).await;
    (before, during, records.iter().map(|r| r.cost_micros).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_control_plane_and_no_offline_allowance_data_planes_spend_only_what_they_hold() {
    let mut f = setup().await;
    for i in 0..DATA_PLANES {
        f.cluster.data_planes[i].offline_allowance = Some(0);
        f.cluster.stop_data_plane(i).await;
        f.cluster.start_data_plane(i).await.expect("data plane");
    }
    let quota = 1_000 * PRICE;
    let c = customer(&f, "outage", Some(100_000_000), Some(quota)).await;
    let (before, during, cost) = spend_through_an_outage(&mut f, &c).await;
    println!(
        "| control plane down, `--offline-allowance 0`, 4 × 8 clients | ${:.3} | ${:.3} before, ${:.3} during | $0.000 |",
        quota as f64 / 1e6,
        (before as i64 * PRICE) as f64 / 1e6,
        (during as i64 * PRICE) as f64 / 1e6
    );
    assert!(cost <= quota, "spent {cost} of {quota}");
    assert!(during > 0, "the leases held were not spent");
    assert!(during < 100, "{during} requests during the outage: more than four data planes' leases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_control_plane_data_planes_spend_their_share_of_what_was_left() {
    let mut f = setup().await;
    let quota = 100 * PRICE;
    let c = customer(&f, "share", Some(100_000_000), Some(quota)).await;
    let (before, during, cost) = spend_through_an_outage(&mut f, &c).await;
    println!(
        "| control plane down, default `--offline-allowance share`, 4 × 8 clients | ${:.3} | ${:.3} before, ${:.3} during | ${:.3} |",
        quota as f64 / 1e6,
        (before as i64 * PRICE) as f64 / 1e6,
        (during as i64 * PRICE) as f64 / 1e6,
        (cost - quota).max(0) as f64 / 1e6
    );
    assert!(during > 0, "nothing was admitted during the outage");
    // Each data plane: its leases and a quarter of what no lease held.
    assert!(cost < 2 * quota, "spent {cost} of {quota}: the fleet may not spend N times a cap");
}
