//! What every backend must do with usage rollups and retention; run from
//! the store conformance suite. `run` uses accounts of its own on a shared
//! store; `run_retention` needs a store of its own opened with `RETENTION`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Counts, Dims, Period, Retention, Row};
use crate::domain::{Resource, UsageFilter, UsageRecord, now_unix};
use crate::store::conformance::{account, token, usage};
use crate::store::{Charged, Store};

const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;

/// The retention `run_retention`'s store must be opened with.
pub const RETENTION: Retention = Retention { usage_days: 30, usage_max_records: 0, rollup_days: 60 };

/// Runs the rollup checks against a shared `store`.
pub async fn run(store: Arc<dyn Store>) {
    rollups_sum_each_applied_record_once(&*store).await;
    concurrent_resends_bump_rollups_once(store.clone()).await;
    video_charges_and_refunds_reach_the_rollups(&*store).await;
}

/// Runs the retention checks against a fresh store opened with `RETENTION`.
pub async fn run_retention(store: Arc<dyn Store>) {
    retention_removes_old_records_and_rollups_outlive_them(&*store).await;
}

/// A record of `account` made at `at` with the given counts.
fn record(id: &str, account: &str, model: &str, at: i64, tokens: (i64, i64, i64), cost: i64) -> UsageRecord {
    let mut record = usage(id, &format!("{account}-tok"), account, model, cost);
    (record.prompt_tokens, record.completion_tokens, record.cached_tokens) = tokens;
    record.created_at = at;
    record
}

/// The rows of `account` in `[from, to)`, keyed by bucket and model.
async fn rows_of(
    store: &dyn Store,
    period: Period,
    account: &str,
    from: i64,
    to: i64,
) -> BTreeMap<(i64, String), Counts> {
    let rows: Vec<Row> = store.rollups(period, from, to).await.expect("read rollups");
    let mut mine = BTreeMap::new();
    for row in rows.into_iter().filter(|row| row.dims.account_id == account) {
        assert!(
            (from..to).contains(&row.bucket_start) && period.bucket(row.bucket_start) == row.bucket_start,
            "{period:?} row outside [{from}, {to}) or off its bucket: {row:?}"
        );
        let previous = mine.insert((row.bucket_start, row.dims.model.clone()), row.counts);
        assert!(previous.is_none(), "two rows for one bucket and dims: {row:?}");
    }
    mine
}

fn counts(requests: i64, tokens: (i64, i64, i64), cost: i64) -> Counts {
    Counts {
        requests,
        prompt_tokens: tokens.0,
        completion_tokens: tokens.1,
        cached_tokens: tokens.2,
        cost_micros: cost,
        ..Counts::default()
    }
}

/// Hourly and daily rows hold the sums of the records applied in them, by
/// their dimensions; a resent record (in the batch or later) adds nothing.
pub async fn rollups_sum_each_applied_record_once(store: &dyn Store) {
    let day = Period::Day.bucket(now_unix()) - 2 * DAY;
    let (h1, h2) = (day + 5 * HOUR, day + 6 * HOUR);
    let a = "rollup-acct";
    let records = vec![
        record("rollup-1", a, "m1", h1 + 10, (100, 50, 20), 1_000),
        record("rollup-2", a, "m1", h1 + 3_000, (7, 3, 0), 30),
        record("rollup-3", a, "m2", h1 + 20, (1, 1, 0), 5),
        record("rollup-4", a, "m1", h2 + 1, (10, 10, 10), 70),
    ];
    let mut with_resend = records.clone();
    with_resend.push(records[0].clone());
    let mut image = record("rollup-5", a, "img", h2 + 2, (0, 0, 0), 40_000);
    (image.images, image.audio_millis) = (2, 1_500);
    with_resend.push(image);
    let outcome = store.apply_usage(&with_resend).await.expect("apply");
    assert_eq!((outcome.applied, outcome.duplicates), (5, 1), "{outcome:?}");
    let again = store.apply_usage(&records).await.expect("apply again");
    assert_eq!((again.applied, again.duplicates), (0, 4), "{again:?}");

    let hourly = rows_of(store, Period::Hour, a, day, day + DAY).await;
    let mut images = counts(1, (0, 0, 0), 40_000);
    (images.images, images.audio_millis) = (2, 1_500);
    let want = BTreeMap::from([
        ((h1, "m1".to_owned()), counts(2, (107, 53, 20), 1_030)),
        ((h1, "m2".to_owned()), counts(1, (1, 1, 0), 5)),
        ((h2, "m1".to_owned()), counts(1, (10, 10, 10), 70)),
        ((h2, "img".to_owned()), images),
    ]);
    assert_eq!(hourly, want, "hourly rollups");
    let daily = rows_of(store, Period::Day, a, day, day + DAY).await;
    let want = BTreeMap::from([
        ((day, "m1".to_owned()), counts(3, (117, 63, 30), 1_100)),
        ((day, "m2".to_owned()), counts(1, (1, 1, 0), 5)),
        ((day, "img".to_owned()), images),
    ]);
    assert_eq!(daily, want, "daily rollups");
    // A range holding only the second hour reads only its rows.
    let second = rows_of(store, Period::Hour, a, h2, h2 + HOUR).await;
    assert_eq!(second.len(), 2, "rows of the second hour: {second:?}");
    assert!(rows_of(store, Period::Hour, a, day + DAY, day + 2 * DAY).await.is_empty(), "an empty day has no rows");
    // The row names every dimension of its records.
    let rows = store.rollups(Period::Hour, h2, h2 + HOUR).await.expect("read rollups");
    let row = rows.iter().find(|r| r.dims.account_id == a && r.dims.model == "m1").expect("the m1 row");
    let want = Dims {
        account_id: a.into(),
        token_id: format!("{a}-tok"),
        model: "m1".into(),
        channel_id: "ch-1".into(),
        group: "default".into(),
    };
    assert_eq!(row.dims, want);
}

/// Many replicas resending the same records at once bump each rollup once.
pub async fn concurrent_resends_bump_rollups_once(store: Arc<dyn Store>) {
    let at = Period::Hour.bucket(now_unix()) - 3 * HOUR;
    let a = "rollup-race";
    let records: Vec<UsageRecord> =
        (0..20).map(|i| record(&format!("rollup-race-{i}"), a, "m", at + i, (1, 2, 0), 3)).collect();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, records) = (store.clone(), records.clone());
            tokio::spawn(async move { store.apply_usage(&records).await.expect("apply").applied })
        })
        .collect();
    let mut applied = 0;
    for task in tasks {
        applied += task.await.expect("task");
    }
    assert_eq!(applied, 20, "each record applied once across the racers");
    let rows = rows_of(&*store, Period::Hour, a, at, at + HOUR).await;
    assert_eq!(rows.get(&(at, "m".to_owned())), Some(&counts(20, (20, 40, 0), 60)), "{rows:?}");
}

/// A video charge counts as a request with its cost; its refund takes the
/// cost back and counts no request; each once.
pub async fn video_charges_and_refunds_reach_the_rollups(store: &dyn Store) {
    let a = "rollup-video-acct";
    store.create(account(a, 10_000_000)).await.expect("create account");
    let Resource::Token(mut tok) = token(&format!("{a}-tok"), a) else { unreachable!() };
    tok.unlimited = true;
    store.create(Resource::Token(tok)).await.expect("create token");
    let at = Period::Hour.bucket(now_unix()) - HOUR;
    let charge = record(&format!("video:{a}"), a, "sora", at + 5, (0, 0, 0), 400_000);
    assert_eq!(store.charge(&charge, now_unix()).await.expect("charge"), Charged::Applied);
    assert_eq!(store.charge(&charge, now_unix()).await.expect("charge again"), Charged::Duplicate);
    let rows = rows_of(store, Period::Hour, a, at, at + HOUR).await;
    assert_eq!(rows.get(&(at, "sora".to_owned())), Some(&counts(1, (0, 0, 0), 400_000)), "after the charge");
    let refund = record(&format!("video-refund:{a}"), a, "sora", at + 9, (0, 0, 0), -400_000);
    store.apply_usage(&[refund.clone(), refund]).await.expect("refund");
    let rows = rows_of(store, Period::Hour, a, at, at + HOUR).await;
    assert_eq!(rows.get(&(at, "sora".to_owned())), Some(&counts(1, (0, 0, 0), 0)), "after the refund");
}

/// `prune` removes raw records past `usage_days` and nothing younger;
/// rollups of pruned records remain until `rollup_days`.
pub async fn retention_removes_old_records_and_rollups_outlive_them(store: &dyn Store) {
    let now = now_unix();
    let a = "retention-acct";
    let ancient = record("retention-ancient", a, "m", now - 100 * DAY, (1, 1, 0), 1);
    let old = record("retention-old", a, "m", now - 45 * DAY, (2, 2, 0), 2);
    let young = record("retention-young", a, "m", now - 29 * DAY, (3, 3, 0), 3);
    let new = record("retention-new", a, "m", now, (4, 4, 0), 4);
    for record in [&ancient, &old, &young, &new] {
        store.apply_usage(std::slice::from_ref(record)).await.expect("apply");
    }
    let mut pruned = 0;
    loop {
        let round = store.prune(now).await.expect("prune");
        if round.records == 0 && round.rollup_rows == 0 {
            break;
        }
        pruned += round.records;
    }
    assert_eq!(pruned, 2, "the two records past 30 days are pruned");
    let left: Vec<String> =
        store.list_usage(&UsageFilter::default()).await.expect("list").into_iter().map(|r| r.request_id).collect();
    assert_eq!(left, ["retention-new", "retention-young"], "records within 30 days stay");
    let old_day = Period::Day.bucket(old.created_at);
    let rows = rows_of(store, Period::Day, a, old_day, old_day + DAY).await;
    assert_eq!(rows.get(&(old_day, "m".to_owned())), Some(&counts(1, (2, 2, 0), 2)), "rollups outlive records");
    let ancient_day = Period::Day.bucket(ancient.created_at);
    assert!(
        rows_of(store, Period::Day, a, ancient_day, ancient_day + DAY).await.is_empty(),
        "a day past 60 days of rollup retention is gone"
    );
    assert!(rows_of(store, Period::Hour, a, ancient_day, ancient_day + DAY).await.is_empty(), "its hours are gone too");
    assert_eq!(store.prune(now).await.expect("prune again").records, 0, "pruning again removes nothing");
}
