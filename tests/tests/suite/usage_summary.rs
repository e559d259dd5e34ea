//! `gwctl usage summary` over a real cluster, on Redis and on the embedded
//! store: requests served by a data plane reach the hourly and daily rollups
//! once each, and the summary gwctl prints sums exactly what the usage
//! records say.

use crate::support;

use gw_tests::mock::upstream::MockUpstream;
use serde_json::Value;
use support::Gateway;

fn sum(records: &[Value], field: &str) -> i64 {
    records.iter().map(|r| r[field].as_i64().unwrap_or_else(|| panic!("no {field} in {r}"))).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_the_summary_sums_exactly_the_usage_records_by_day_model_and_channel() {
    summary_sums_the_records(Gateway::start(1).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_embedded_store_the_summary_sums_exactly_the_usage_records() {
    summary_sums_the_records(Gateway::start_embedded(1).await).await;
}

async fn summary_sums_the_records(gateway: Gateway) {
    let upstream = MockUpstream::start().await.expect("mock upstream");
    let channel = gateway.channel("main", &upstream.base_url(), 0, &[]).await;
    gateway.synced().await;
    for stream in [false, true, false] {
        assert_eq!(gateway.chat(0, stream).await.status, 200);
    }
    let records = gateway.wait_for_usage(3).await;
    let cluster = &gateway.cluster;

    let summary = cluster
        .gwctl(&["usage", "summary", "--by", "day,model", "--account", "acme", "--from", "1d"])
        .await
        .expect("gwctl usage summary");
    assert_eq!(summary["group_by"], serde_json::json!(["day", "model"]), "{summary}");
    let rows = summary["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "one day, one model: {summary}");
    let row = &rows[0];
    assert_eq!(row["model"], support::MODEL);
    assert_eq!(row["account_id"], "", "not grouped by account: {row}");
    let day = records[0]["created_at"].as_i64().expect("created_at");
    assert_eq!(row["bucket_start"].as_i64(), Some(day - day.rem_euclid(86_400)), "{row}");
    assert_eq!(row["requests"], 3);
    for field in ["prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros"] {
        assert_eq!(row[field].as_i64(), Some(sum(&records, field)), "{field}: {row} vs {records:?}");
    }
    assert!(sum(&records, "cost_micros") > 0, "the requests cost something");
    assert_eq!(summary["totals"]["cost_micros"], row["cost_micros"], "{summary}");
    assert_eq!(summary["totals"]["cost_usd"], row["cost_usd"], "{summary}");

    let by_channel = cluster
        .gwctl(&["usage", "summary", "--by", "hour,channel,token", "--channel", "main", "--from", "1d"])
        .await
        .expect("gwctl usage summary by channel");
    let rows = by_channel["rows"].as_array().expect("rows");
    let requests: i64 = rows.iter().map(|r| r["requests"].as_i64().unwrap_or(0)).sum();
    assert_eq!(requests, 3, "{by_channel}");
    assert!(rows.iter().all(|r| r["channel_id"] == channel.as_str() && r["token_id"] == gateway.token.as_str()));

    let other = cluster
        .gwctl(&["usage", "summary", "--model", "no-such-model", "--from", "1d"])
        .await
        .expect("gwctl usage summary of another model");
    assert_eq!(other["rows"], serde_json::json!([]), "{other}");
    assert_eq!(other["totals"]["requests"], 0, "{other}");

    let both = cluster.gwctl_raw(&["usage", "summary", "--by", "hour,day"]).await.expect("gwctl");
    assert!(!both.status.success(), "hour and day together are refused");
}
