//! Calendar budgets across data planes: a token's daily budget and an
//! account's rolling-hours budget cap what two data planes with four
//! clients each admit, exactly as lifetime caps do, with the catalogue's 403
//! messages while the lifetime caps have room; moving the control plane's
//! clock into the next window makes the budget available again; gwctl sets
//! the budgets and shows what is left and when the window resets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use gw_control_plane::domain::calendar::{WindowBudget, WindowPeriod, rfc3339_in};
use gw_control_plane::domain::now_unix;
use gw_proto::pb;
use gw_tests::{
    harness::{Cluster, eventually},
    mock::upstream::MockUpstream,
    redis::RedisServer,
};
use serde_json::{Value, json};

const DATA_PLANES: usize = 2;
const CLIENTS_PER_PLANE: usize = 4;
/// What one chat request costs: a per-request price and no token prices.
const PRICE: i64 = 1_000;
const TOKEN_QUOTA_MESSAGE: &str = "该令牌额度已用尽";
const BALANCE_MESSAGE: &str = "用户额度不足, 剩余额度: ＄";

struct Fixture {
    cluster: Cluster,
    _upstream: MockUpstream,
    _redis: RedisServer,
}

async fn setup() -> Fixture {
    let redis = RedisServer::start().await.expect("redis-server");
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let cluster = Cluster::start(&redis.url(), DATA_PLANES).await.expect("cluster");
    let mut admin = cluster.admin();
    let model =
        pb::Model { id: "flat".into(), category: "chat".into(), request_price_micros: PRICE, ..Default::default() };
    admin.create_model(model).await.expect("model");
    let channel = pb::Channel {
        name: "main".into(),
        r#type: "openai".into(),
        base_url: upstream.base_url(),
        api_key: "sk-upstream-calendar".into(),
        has_key: true,
        models: vec!["flat".into()],
        groups: vec!["default".into()],
        weight: 1,
        ..Default::default()
    };
    admin.create_channel(channel).await.expect("channel");
    Fixture { cluster, _upstream: upstream, _redis: redis }
}

/// Runs gwctl and returns its JSON.
async fn gwctl(f: &Fixture, args: &[&str]) -> Value {
    f.cluster.gwctl(args).await.unwrap_or_else(|e| panic!("{e:#}"))
}

/// One chat request to data plane `i`: its status and error message.
async fn chat(f: &Fixture, i: usize, key: &str) -> (u16, String) {
    let body = json!({"model": "flat", "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/chat/completions", f.cluster.base_url(i));
    let response = f.cluster.http().post(url).bearer_auth(key).json(&body).send().await.expect("chat");
    let status = response.status().as_u16();
    let json: Value = response.json().await.unwrap_or_default();
    let message = json["error"]["message"].as_str().unwrap_or_default();
    (status, message.split(" (request id").next().unwrap_or_default().to_owned())
}

/// Four clients per data plane send until each is refused; then every data
/// plane is asked in turn until `cap` requests were admitted (what a
/// refused data plane left to another is given back when idle). Returns the
/// requests admitted and every refusal seen.
async fn spend_window(f: &Fixture, key: &str, cap: usize) -> (usize, Vec<(u16, String)>) {
    let clients = (0..DATA_PLANES * CLIENTS_PER_PLANE).map(|c| async move {
        let (mut admitted, mut refusals) = (0, Vec::new());
        loop {
            let (status, message) = chat(f, c % DATA_PLANES, key).await;
            if status != 200 {
                refusals.push((status, message));
                return (admitted, refusals);
            }
            admitted += 1;
        }
    });
    let (mut admitted, mut refusals) = (0, Vec::new());
    for (a, r) in join_all(clients).await {
        admitted += a;
        refusals.extend(r);
    }
    let total = AtomicUsize::new(admitted);
    let seen = std::sync::Mutex::new(refusals);
    eventually("the whole window to be spent", Duration::from_secs(20), || async {
        for i in 0..DATA_PLANES {
            let (status, message) = chat(f, i, key).await;
            if status == 200 {
                total.fetch_add(1, Ordering::SeqCst);
            } else if let Ok(mut seen) = seen.lock() {
                seen.push((status, message));
            }
        }
        (total.load(Ordering::SeqCst) >= cap).then_some(())
    })
    .await;
    (total.load(Ordering::SeqCst), seen.into_inner().unwrap_or_default())
}

/// The ledger's cost for `token`, once it has `count` records.
async fn ledger_cost(f: &Fixture, token: &str, count: usize) -> i64 {
    eventually(&format!("{count} usage records"), Duration::from_secs(15), || async {
        let request = pb::ListUsageRequest { token_id: token.into(), limit: 10_000, ..Default::default() };
        let records = f.cluster.admin().list_usage(request).await.ok()?.into_inner().items;
        (records.len() == count).then(|| records.iter().map(|r| r.cost_micros).sum())
    })
    .await
}

/// Until data plane `i` admits `key` again.
async fn admitted_again(f: &Fixture, i: usize, key: &str) {
    eventually(&format!("data plane {i} to admit again"), Duration::from_secs(15), || async {
        (chat(f, i, key).await.0 == 200).then_some(())
    })
    .await;
}

/// The window of `period` in `zone` that holds `at`: start and reset, as
/// gwctl shows them.
fn expected_window(period: WindowPeriod, rolling_hours: u32, zone: &str, at: i64) -> (String, String) {
    let budget = WindowBudget { period, rolling_hours, quota_micros: 0, time_zone: zone.into() };
    let window = budget.window_at(at).expect("window");
    (rfc3339_in(window.start, zone), rfc3339_in(window.end, zone))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daily_token_budget_refuses_with_the_quota_403_until_the_next_day() {
    let f = setup().await;
    let account = gwctl(&f, &["account", "create", "--name", "daily", "--balance", "100"]).await;
    let account = account["id"].as_str().expect("account id");
    let bad = f
        .cluster
        .gwctl_raw(&["token", "create", "--account", account, "--period", "day", "--time-zone", "Mars/Olympus"])
        .await
        .expect("gwctl");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown time zone \"Mars/Olympus\""), "{bad:?}");
    let created = gwctl(
        &f,
        &["token", "create", "--account", account, "--quota", "1", "--period", "day", "--period-quota", "0.01"]
            .into_iter()
            .chain(["--time-zone", "Europe/Berlin"])
            .collect::<Vec<_>>(),
    )
    .await;
    let (token, key) =
        (created["id"].as_str().expect("id").to_owned(), created["key"].as_str().expect("key").to_owned());
    assert_eq!(
        (created["window"]["period"].as_str(), created["window"]["quota_micros"].as_i64()),
        (Some("day"), Some(10 * PRICE))
    );
    f.cluster.wait_until_served_everywhere(&key).await;

    let (admitted, refusals) = spend_window(&f, &key, 10).await;
    assert!(!refusals.is_empty(), "nothing was refused");
    for refusal in &refusals {
        assert_eq!((refusal.0, refusal.1.as_str()), (403, TOKEN_QUOTA_MESSAGE));
    }
    assert_eq!(admitted, 10, "admitted against a daily budget of 10 requests");
    assert_eq!(ledger_cost(&f, &token, 10).await, 10 * PRICE);
    for i in 0..DATA_PLANES {
        assert_eq!(chat(&f, i, &key).await, (403, TOKEN_QUOTA_MESSAGE.to_owned()), "data plane {i}, budget spent");
    }

    let shown = gwctl(&f, &["token", "get", &token]).await;
    assert_eq!(shown["used_micros"], 10 * PRICE, "the lifetime quota has room: {shown}");
    assert_eq!(shown["quota_micros"], 1_000_000);
    let window = &shown["window"];
    assert_eq!(
        (window["used_micros"].as_i64(), window["remaining_micros"].as_i64()),
        (Some(10 * PRICE), Some(0)),
        "{window}"
    );
    let (start, resets) = expected_window(WindowPeriod::Day, 0, "Europe/Berlin", now_unix());
    assert_eq!(
        (window["window_start"].as_str(), window["resets_at"].as_str()),
        (Some(start.as_str()), Some(resets.as_str()))
    );
    assert!(resets.ends_with("T00:00:00+01:00") || resets.ends_with("T00:00:00+02:00"), "Berlin midnight: {resets}");

    // Into the next day: the budget is there again.
    let budget = WindowBudget {
        period: WindowPeriod::Day,
        rolling_hours: 0,
        quota_micros: 0,
        time_zone: "Europe/Berlin".into(),
    };
    let next_day = budget.window_at(now_unix()).expect("window").end;
    f.cluster.control_plane.clock.advance(next_day - now_unix() + 1);
    for i in 0..DATA_PLANES {
        admitted_again(&f, i, &key).await;
    }
    let shown = gwctl(&f, &["token", "get", &token]).await;
    let (_, resets_after) = expected_window(WindowPeriod::Day, 0, "Europe/Berlin", f.cluster.control_plane.clock.now());
    assert_eq!(shown["window"]["resets_at"].as_str(), Some(resets_after.as_str()));
    assert_ne!(resets_after, resets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_account_budget_refuses_with_the_balance_403_until_its_hours_pass() {
    let f = setup().await;
    // Unlimited balance, unlimited token: only the account's window caps.
    let account = gwctl(
        &f,
        &["account", "create", "--name", "rolling", "--unlimited", "--period", "rolling", "--rolling-hours", "1"]
            .into_iter()
            .chain(["--period-quota", "0.005"])
            .collect::<Vec<_>>(),
    )
    .await;
    let account = account["id"].as_str().expect("account id").to_owned();
    let created = gwctl(&f, &["token", "create", "--account", &account]).await;
    let (token, key) =
        (created["id"].as_str().expect("id").to_owned(), created["key"].as_str().expect("key").to_owned());
    f.cluster.wait_until_served_everywhere(&key).await;

    let (admitted, refusals) = spend_window(&f, &key, 5).await;
    assert!(!refusals.is_empty(), "nothing was refused");
    for (status, message) in &refusals {
        assert_eq!(*status, 403, "{message}");
        assert!(message.starts_with(BALANCE_MESSAGE), "{message}");
    }
    assert_eq!(admitted, 5, "admitted against a rolling budget of 5 requests");
    assert_eq!(ledger_cost(&f, &token, 5).await, 5 * PRICE);

    let shown = gwctl(&f, &["account", "get", &account]).await;
    let window = &shown["window"];
    assert_eq!((window["period"].as_str(), window["rolling_hours"].as_u64()), (Some("rolling"), Some(1)), "{shown}");
    assert_eq!((window["used_micros"].as_i64(), window["remaining_micros"].as_i64()), (Some(5 * PRICE), Some(0)));
    let (_, resets) = expected_window(WindowPeriod::Rolling, 1, "UTC", now_unix());
    assert_eq!(window["resets_at"].as_str(), Some(resets.as_str()), "the next full hour");
    let listed = gwctl(&f, &["account", "list"]).await;
    let row = listed["items"].as_array().and_then(|items| items.iter().find(|a| a["id"] == account.as_str()));
    assert_eq!(row.map(|a| a["window"]["remaining_micros"].clone()), Some(json!(0)), "{listed}");

    // An hour on, the hour that was spent has left the window.
    f.cluster.control_plane.clock.advance(3_600);
    for i in 0..DATA_PLANES {
        admitted_again(&f, i, &key).await;
    }
    // Removing the budget leaves the account unlimited.
    let removed = gwctl(&f, &["account", "update", &account, "--period", "none"]).await;
    assert!(removed["window"].is_null(), "{removed}");
}
