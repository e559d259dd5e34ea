//! Usage rollups and retention in the embedded store. `rollups` maps
//! `(period code, bucket start, dims JSON)` to the seven counters of
//! `Counts`; the ledger bumps them in the transaction that applies a record.
//! `prune` removes, in one transaction each call, raw records past
//! `usage_days` from the oldest applied on, and buckets past `rollup_days`.

use async_trait::async_trait;
use redb::{ReadableTable, TableDefinition};

use super::{EmbeddedStore, USAGE, db_err, decode};
use crate::domain::UsageRecord;
use crate::store::Result;
use crate::store::rollup::{Counts, Dims, Period, Pruned, RollupStore, Row};

/// `(period code, bucket start, dims)` → counters.
pub(super) const ROLLUPS: TableDefinition<(u8, i64, &str), [i64; 7]> = TableDefinition::new("rollups");

/// Records, and buckets, one `prune` removes at most.
const PRUNE_BATCH: u64 = 10_000;

#[async_trait]
impl RollupStore for EmbeddedStore {
    async fn rollups(&self, period: Period, from: i64, to: i64) -> Result<Vec<Row>> {
        self.read(move |txn| {
            let table = txn.open_table(ROLLUPS).map_err(db_err)?;
            let mut rows = Vec::new();
            for entry in table.range((period.code(), from, "")..(period.code(), to, "")).map_err(db_err)? {
                let (key, counts) = entry.map_err(db_err)?;
                let (_, bucket_start, dims) = key.value();
                if let Some(dims) = Dims::decode(dims) {
                    rows.push(Row { bucket_start, dims, counts: Counts::from_array(counts.value()) });
                }
            }
            Ok(rows)
        })
        .await
    }

    async fn prune(&self, now: i64) -> Result<Pruned> {
        let retention = self.retention;
        let (pruned, _) = self
            .write(move |txn| {
                let mut pruned = Pruned::default();
                let mut log = txn.open_table(USAGE).map_err(db_err)?;
                let cutoff = retention.usage_cutoff(now);
                while pruned.records < PRUNE_BATCH {
                    let oldest = match log.first().map_err(db_err)? {
                        Some((seq, json)) => Some((seq.value(), decode::<UsageRecord>(json.value())?.created_at)),
                        None => None,
                    };
                    let Some((seq, _)) = oldest.filter(|(_, made)| *made < cutoff) else { break };
                    log.remove(seq).map_err(db_err)?;
                    pruned.records += 1;
                }
                let mut rollups = txn.open_table(ROLLUPS).map_err(db_err)?;
                for period in Period::ALL {
                    // Buckets starting before `last` have expired at `now`.
                    let last = now.saturating_sub(retention.rollup_expires_at(period, 0)).saturating_add(1);
                    let mut expired = Vec::new();
                    for entry in
                        rollups.range((period.code(), i64::MIN, "")..(period.code(), last, "")).map_err(db_err)?
                    {
                        let (key, _) = entry.map_err(db_err)?;
                        let (_, start, dims) = key.value();
                        expired.push((start, dims.to_owned()));
                        if pruned.rollup_rows + expired.len() as u64 >= PRUNE_BATCH {
                            break;
                        }
                    }
                    for (start, dims) in &expired {
                        rollups.remove((period.code(), *start, dims.as_str())).map_err(db_err)?;
                    }
                    pruned.rollup_rows += expired.len() as u64;
                }
                Ok((pruned, vec![]))
            })
            .await?;
        Ok(pruned)
    }
}
