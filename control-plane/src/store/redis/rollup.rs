//! Usage rollups and retention on Redis.
//!
//! Layout: one hash per period and bucket, `{gw}:rollup:hour:<start>` and
//! `{gw}:rollup:day:<start>` (`<start>` the bucket's first Unix second, UTC),
//! whose fields are `<dims>#<counter>`: `<dims>` the JSON array `[account,
//! token, model, channel, group]`, `<counter>` one of `req`, `in`, `out`,
//! `cached`, `img`, `audio`, `cost` (micro-USD), each an integer. The ledger's
//! scripts bump them with `HINCRBY` in the step that applies the record, and
//! set the hash to expire (`EXPIREAT`) `rollup_days` after its bucket ends,
//! so Redis drops old buckets itself. A bucket holds at most seven fields per
//! token × model × channel that had usage in it; keys grow by 24 + 1 a day
//! and live `rollup_days`.
//!
//! Raw records (`{gw}:usage`, newest applied first) are trimmed from the tail
//! by `prune` while the oldest is past `usage_days`, and to
//! `usage_max_records` by every usage script. `prune` also removes the
//! hourly sets of idempotency markers (see `ledger`) once their hour is
//! past both `usage_days` and the idempotency window and a day: they never
//! expire on their own, so a record is never applied twice while its row
//! can exist or it can be sent again.

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use super::layout::{APPLIED_BUCKET_SECS, APPLIED_BUCKETS, USAGE, applied_bucket_key, applied_set_key, rollup_key};
use crate::store::rollup::{Counts, Dims, Period, Pruned, RollupStore, Row};
use crate::store::{IDEMPOTENCY_WINDOW_SECS, Result, StoreError};

/// Bucket hashes read per pipeline.
const READ_BATCH: usize = 256;
/// Records one `prune` removes at most.
const PRUNE_BATCH: u64 = 10_000;
/// Marker hashes one `prune` removes at most.
const PRUNE_MARKERS: isize = 1_000;
/// Beyond the idempotency window, how long markers are kept.
const MARKER_GRACE_SECS: i64 = 24 * 60 * 60;

/// Key 1 `{gw}:usage`. Args: 1 cutoff (Unix second), 2 most to remove.
/// Pops the oldest applied record while it was made before the cutoff.
const PRUNE: &str = r"
local cutoff, most, removed = tonumber(ARGV[1]), tonumber(ARGV[2]), 0
while removed < most do
  local tail = redis.call('LINDEX', KEYS[1], -1)
  if not tail then break end
  local ok, record = pcall(cjson.decode, tail)
  if not ok or type(record.created_at) ~= 'number' or record.created_at >= cutoff then break end
  redis.call('RPOP', KEYS[1])
  removed = removed + 1
end
return removed
";

/// The hash of the rollup bucket of `period` starting at `start`.
pub(super) fn bucket_key(period: Period, start: i64) -> String {
    rollup_key(period.as_str(), start)
}

#[async_trait]
impl RollupStore for RedisStore {
    async fn rollups(&self, period: Period, from: i64, to: i64) -> Result<Vec<Row>> {
        let starts: Vec<i64> = (period.bucket(from)..to).step_by(period.secs().unsigned_abs() as usize).collect();
        let mut rows = Vec::new();
        let mut conn = self.conn.clone();
        for chunk in starts.chunks(READ_BATCH) {
            let mut pipe = redis::pipe();
            for start in chunk {
                pipe.hgetall(bucket_key(period, *start));
            }
            let hashes: Vec<Vec<(String, i64)>> = pipe.query_async(&mut conn).await.map_err(StoreError::Redis)?;
            for (start, fields) in chunk.iter().zip(hashes) {
                if *start >= from {
                    rows.extend(bucket_rows(*start, fields));
                }
            }
        }
        Ok(rows)
    }

    async fn prune(&self, now: i64) -> Result<Pruned> {
        let removed: u64 = Script::new(PRUNE)
            .key(USAGE)
            .arg(self.retention.usage_cutoff(now))
            .arg(PRUNE_BATCH)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        self.prune_markers(now).await?;
        Ok(Pruned { records: removed, rollup_rows: 0 })
    }
}

// === impl RedisStore ===

impl RedisStore {
    /// Removes the marker sets (and the hashes of earlier versions) of
    /// hours past both the raw records' retention and the idempotency
    /// window (and a day).
    async fn prune_markers(&self, now: i64) -> Result<()> {
        let cutoff = self.retention.usage_cutoff(now).min(now - IDEMPOTENCY_WINDOW_SECS - MARKER_GRACE_SECS);
        let mut conn = self.conn.clone();
        let old: Vec<i64> = redis::cmd("ZRANGEBYSCORE")
            .arg(APPLIED_BUCKETS)
            .arg("-inf")
            .arg(cutoff - APPLIED_BUCKET_SECS)
            .arg("LIMIT")
            .arg(0)
            .arg(PRUNE_MARKERS)
            .query_async(&mut conn)
            .await
            .map_err(StoreError::Redis)?;
        if old.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for start in &old {
            pipe.del(applied_set_key(*start)).ignore();
            pipe.del(applied_bucket_key(*start)).ignore();
            pipe.zrem(APPLIED_BUCKETS, *start).ignore();
        }
        let () = pipe.query_async(&mut conn).await.map_err(StoreError::Redis)?;
        Ok(())
    }
}

/// The rows of one bucket hash; fields that do not parse are skipped.
fn bucket_rows(start: i64, fields: Vec<(String, i64)>) -> Vec<Row> {
    let mut rows: std::collections::BTreeMap<String, [i64; 7]> = std::collections::BTreeMap::new();
    for (field, value) in fields {
        let Some((dims, counter)) = field.rsplit_once('#') else { continue };
        let Some(index) = Counts::NAMES.iter().position(|name| *name == counter) else { continue };
        rows.entry(dims.to_owned()).or_default()[index] = value;
    }
    rows.into_iter()
        .filter_map(|(dims, counts)| {
            Some(Row { bucket_start: start, dims: Dims::decode(&dims)?, counts: Counts::from_array(counts) })
        })
        .collect()
}
