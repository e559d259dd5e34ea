//! Usage rollups and retention: per hour and per day, the sums of every
//! applied usage record by account, token, model, channel and group, and how
//! long raw records and rollups are kept.
//!
//! A rollup is bumped by the same atomic step that applies a record (the
//! ledger's Lua script on Redis, its redb transaction in the embedded
//! store), so it counts each applied request id exactly once, refunds
//! included (they subtract their cost and count no request). Buckets are
//! UTC hours and days of the record's `created_at`. Raw records are kept
//! `usage_days` (and at most `usage_max_records`); rollups `rollup_days`,
//! which is meant to be longer, so summaries outlive the records.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::Result;
use crate::domain::UsageRecord;

const DAY_SECS: i64 = 24 * 60 * 60;

/// The length of a rollup bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    Hour,
    Day,
}

/// What a rollup row is summed over; every record has exactly one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dims {
    pub account_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    pub group: String,
}

/// The sums of a rollup row. Money in micro-USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub requests: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    pub images: i64,
    pub audio_millis: i64,
    pub cost_micros: i64,
}

/// One rollup row: the sums of the records of one bucket and `dims`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Unix second the bucket starts at.
    pub bucket_start: i64,
    pub dims: Dims,
    pub counts: Counts,
}

/// How long usage is kept. Days are counted from a record's `created_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Raw usage records older than this many days are removed.
    pub usage_days: u32,
    /// At most this many raw records are kept (the oldest applied go
    /// first); 0 for no cap.
    pub usage_max_records: u64,
    /// Hourly and daily rollups are kept this many days past their bucket.
    pub rollup_days: u32,
}

/// What one `prune` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub records: u64,
    /// Rollup rows removed (Redis expires its own buckets: always 0 there).
    pub rollup_rows: u64,
}

/// Rollups and retention. Every `Store` is one.
#[async_trait]
pub trait RollupStore: Send + Sync {
    /// The rollup rows of `period` whose bucket starts in `[from, to)`,
    /// in no particular order. Buckets past retention are gone.
    async fn rollups(&self, period: Period, from: i64, to: i64) -> Result<Vec<Row>>;

    /// Removes raw usage records older than the retention at Unix second
    /// `now`, oldest applied first: one is removed once every record applied
    /// before it is gone too (records arrive in about the order they were
    /// made, so in practice at its age). Also removes rollup buckets past
    /// theirs where the backend does not expire them itself. Does at most a
    /// bounded amount of work per call; call again while it removes any.
    async fn prune(&self, now: i64) -> Result<Pruned>;
}

// === impl Period ===

impl Period {
    pub const ALL: [Period; 2] = [Period::Hour, Period::Day];

    /// The bucket length in seconds.
    pub fn secs(self) -> i64 {
        match self {
            Period::Hour => 60 * 60,
            Period::Day => DAY_SECS,
        }
    }

    /// The start of the bucket holding Unix second `at`.
    pub fn bucket(self, at: i64) -> i64 {
        at.div_euclid(self.secs()) * self.secs()
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::Day => "day",
        }
    }

    /// A stable small number for storage keys.
    pub fn code(self) -> u8 {
        match self {
            Period::Hour => 1,
            Period::Day => 2,
        }
    }
}

// === impl Dims ===

impl Dims {
    /// The dimensions of `record`.
    pub fn of(record: &UsageRecord) -> Dims {
        Dims {
            account_id: record.account_id.clone(),
            token_id: record.token_id.clone(),
            model: record.model.clone(),
            channel_id: record.channel_id.clone(),
            group: record.group.clone(),
        }
    }

    /// The storage form: a JSON array, so any character in an id is safe.
    pub fn encode(&self) -> String {
        let parts = [&self.account_id, &self.token_id, &self.model, &self.channel_id, &self.group];
        serde_json::to_string(&parts).unwrap_or_default()
    }

    /// Reads `encode`'s form; `None` when it is not one.
    pub fn decode(text: &str) -> Option<Dims> {
        let [account_id, token_id, model, channel_id, group]: [String; 5] = serde_json::from_str(text).ok()?;
        Some(Dims { account_id, token_id, model, channel_id, group })
    }
}

// === impl Counts ===

impl Counts {
    /// Storage names of the counters, in `to_array` order.
    pub const NAMES: [&'static str; 7] = ["req", "in", "out", "cached", "img", "audio", "cost"];

    /// What `record` adds to its rollups. A refund (negative cost, such as
    /// a failed video's) is not a request.
    pub fn of(record: &UsageRecord) -> Counts {
        Counts {
            requests: i64::from(record.cost_micros >= 0),
            prompt_tokens: record.prompt_tokens,
            completion_tokens: record.completion_tokens,
            cached_tokens: record.cached_tokens,
            images: record.images,
            audio_millis: record.audio_millis,
            cost_micros: record.cost_micros,
        }
    }

    pub fn to_array(self) -> [i64; 7] {
        [
            self.requests,
            self.prompt_tokens,
            self.completion_tokens,
            self.cached_tokens,
            self.images,
            self.audio_millis,
            self.cost_micros,
        ]
    }

    pub fn from_array(a: [i64; 7]) -> Counts {
        let [requests, prompt_tokens, completion_tokens, cached_tokens, images, audio_millis, cost_micros] = a;
        Counts { requests, prompt_tokens, completion_tokens, cached_tokens, images, audio_millis, cost_micros }
    }

    /// Adds `other`, saturating.
    pub fn add(&mut self, other: &Counts) {
        let mut sum = self.to_array();
        for (mine, theirs) in sum.iter_mut().zip(other.to_array()) {
            *mine = mine.saturating_add(theirs);
        }
        *self = Counts::from_array(sum);
    }
}

// === impl Retention ===

impl Default for Retention {
    fn default() -> Self {
        Retention { usage_days: 90, usage_max_records: 1_000_000, rollup_days: 400 }
    }
}

impl Retention {
    /// Raw records made before this Unix second are past retention at `now`.
    pub fn usage_cutoff(&self, now: i64) -> i64 {
        now.saturating_sub(i64::from(self.usage_days) * DAY_SECS)
    }

    /// When the rollup bucket of `period` starting at `bucket_start` expires.
    pub fn rollup_expires_at(&self, period: Period, bucket_start: i64) -> i64 {
        bucket_start.saturating_add(period.secs()).saturating_add(i64::from(self.rollup_days) * DAY_SECS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_survive_any_characters() {
        let dims = Dims {
            account_id: "a#\"x".into(),
            token_id: "t\u{1f}".into(),
            model: "m/1".into(),
            channel_id: String::new(),
            group: "g".into(),
        };
        assert_eq!(Dims::decode(&dims.encode()), Some(dims));
        assert_eq!(Dims::decode("nonsense"), None);
    }

    #[test]
    fn buckets_are_utc_hours_and_days() {
        assert_eq!(Period::Hour.bucket(7_201), 7_200);
        assert_eq!(Period::Day.bucket(86_399), 0);
        assert_eq!(Period::Day.bucket(-1), -86_400);
    }
}
