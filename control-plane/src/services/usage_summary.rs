//! Usage summaries: sums over the store's hourly or daily rollups, filtered
//! and grouped by any of hour or day and account, token, model, channel.
//!
//! A range is read in whole UTC hours; daily rollups are read when the range
//! is whole days and the grouping is not by hour, hourly ones otherwise.

use std::collections::BTreeMap;

use crate::{
    domain::now_unix,
    store::{
        Store, StoreError,
        rollup::{Counts, Period, Row},
    },
};

/// Buckets one summary may read at most.
pub const MAX_BUCKETS: i64 = 20_000;
/// The range when none is given: this long before `to`.
const DEFAULT_SPAN_SECS: i64 = 7 * 86_400;

/// What a summary is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    Hour,
    Day,
    Account,
    Token,
    Model,
    Channel,
}

/// A summary to compute; empty filters (and zero times) match everything.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub group_by: Vec<Dimension>,
    pub from: i64,
    pub to: i64,
    pub account_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    pub group: String,
}

/// One group's sums; dimensions not grouped by are empty (`bucket_start` 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryRow {
    pub bucket_start: i64,
    pub account_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    pub counts: Counts,
}

/// A computed summary over `[from, to)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub rows: Vec<SummaryRow>,
    pub from: i64,
    pub to: i64,
}

/// Why a summary could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Sums the rollups `query` asks for. Fails with `Invalid` when it groups
/// by both hour and day, its range is empty, or it spans more than
/// `MAX_BUCKETS` buckets.
pub async fn summarize(store: &dyn Store, query: &Query) -> Result<Summary, SummaryError> {
    let by = |d: Dimension| query.group_by.contains(&d);
    if by(Dimension::Hour) && by(Dimension::Day) {
        return Err(SummaryError::Invalid("group by hour or by day, not both".into()));
    }
    let hour = Period::Hour.secs();
    let to = if query.to == 0 { now_unix() } else { query.to };
    let to = to.div_euclid(hour) * hour + if to.rem_euclid(hour) == 0 { 0 } else { hour };
    let from = Period::Hour.bucket(if query.from == 0 { to - DEFAULT_SPAN_SECS } else { query.from });
    if from >= to {
        return Err(SummaryError::Invalid("from must be before to".into()));
    }
    let whole_days = Period::Day.bucket(from) == from && Period::Day.bucket(to) == to;
    let period = if whole_days && !by(Dimension::Hour) { Period::Day } else { Period::Hour };
    if (to - from) / period.secs() > MAX_BUCKETS {
        return Err(SummaryError::Invalid(format!(
            "the range spans more than {MAX_BUCKETS} {}s; shorten it",
            period.as_str()
        )));
    }
    let rows = store.rollups(period, from, to).await?;
    Ok(Summary { rows: group(query, rows), from, to })
}

/// Filters `rows` and sums them into the groups `query` asks for, ordered.
fn group(query: &Query, rows: Vec<Row>) -> Vec<SummaryRow> {
    let by = |d: Dimension| query.group_by.contains(&d);
    let is = |want: &str, have: &str| want.is_empty() || want == have;
    let mut groups: BTreeMap<(i64, String, String, String, String), Counts> = BTreeMap::new();
    for row in rows {
        let d = &row.dims;
        if !(is(&query.account_id, &d.account_id)
            && is(&query.token_id, &d.token_id)
            && is(&query.model, &d.model)
            && is(&query.channel_id, &d.channel_id)
            && is(&query.group, &d.group))
        {
            continue;
        }
        let bucket = if by(Dimension::Hour) {
            Period::Hour.bucket(row.bucket_start)
        } else if by(Dimension::Day) {
            Period::Day.bucket(row.bucket_start)
        } else {
            0
        };
        let keep = |dim: Dimension, value: &str| if by(dim) { value.to_owned() } else { String::new() };
        let key = (
            bucket,
            keep(Dimension::Account, &d.account_id),
            keep(Dimension::Token, &d.token_id),
            keep(Dimension::Model, &d.model),
            keep(Dimension::Channel, &d.channel_id),
        );
        groups.entry(key).or_default().add(&row.counts);
    }
    groups
        .into_iter()
        .map(|((bucket_start, account_id, token_id, model, channel_id), counts)| SummaryRow {
            bucket_start,
            account_id,
            token_id,
            model,
            channel_id,
            counts,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::store::rollup::Dims;

    fn row(bucket_start: i64, model: &str, channel: &str, requests: i64) -> Row {
        let dims = Dims {
            account_id: "a".into(),
            token_id: "t".into(),
            model: model.into(),
            channel_id: channel.into(),
            group: "g".into(),
        };
        Row { bucket_start, dims, counts: Counts { requests, cost_micros: requests * 10, ..Counts::default() } }
    }

    #[test]
    fn rows_are_summed_into_the_groups_asked_for_and_filtered() {
        let rows = vec![row(3_600, "m1", "c1", 1), row(7_200, "m1", "c2", 2), row(7_200, "m2", "c1", 4)];
        let query = Query { group_by: vec![Dimension::Day, Dimension::Model], ..Query::default() };
        let grouped = group(&query, rows.clone());
        let summed: Vec<_> = grouped.iter().map(|r| (r.bucket_start, r.model.as_str(), r.counts.requests)).collect();
        assert_eq!(summed, [(0, "m1", 3), (0, "m2", 4)]);
        assert!(grouped.iter().all(|r| r.channel_id.is_empty() && r.account_id.is_empty()));

        let query = Query { group_by: vec![Dimension::Hour], channel_id: "c1".into(), ..Query::default() };
        let summed: Vec<_> = group(&query, rows).iter().map(|r| (r.bucket_start, r.counts.cost_micros)).collect();
        assert_eq!(summed, [(3_600, 10), (7_200, 40)]);
    }
}
