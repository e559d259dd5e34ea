//! In-flight slots in the embedded store: the `slots` table,
//! `(key, holder)` → `(slots, expires_at)`. One write transaction per ask,
//! so counting the free slots and taking them are one step.

use async_trait::async_trait;
use redb::{ReadableTable as _, TableDefinition};

use super::{EmbeddedStore, db_err};
use crate::store::Result;
use crate::store::slots::{SlotAsk, SlotLease, SlotStore, grant_slots};

const SLOTS: TableDefinition<(&str, &str), (u64, i64)> = TableDefinition::new("slots");

#[async_trait]
impl SlotStore for EmbeddedStore {
    async fn lease_slots(&self, ask: &SlotAsk) -> Result<SlotLease> {
        let ask = ask.clone();
        let (lease, _) = self
            .write(move |txn| {
                let mut table = txn.open_table(SLOTS).map_err(db_err)?;
                let (mut others, mut own, mut lapsed) = (0_u64, 0_u64, Vec::new());
                for entry in table.range((ask.key.as_str(), "")..).map_err(db_err)? {
                    let (key, value) = entry.map_err(db_err)?;
                    let (key, holder) = key.value();
                    if key != ask.key {
                        break;
                    }
                    let (slots, expires) = value.value();
                    if expires <= ask.now {
                        lapsed.push(holder.to_owned());
                    } else if holder == ask.holder {
                        own = slots;
                    } else {
                        others += slots;
                    }
                }
                for holder in &lapsed {
                    table.remove((ask.key.as_str(), holder.as_str())).map_err(db_err)?;
                }
                own = own.saturating_sub(u64::from(ask.give_back));
                let granted = grant_slots(ask.limit, others + own, ask.want);
                own += u64::from(granted);
                let entry = (ask.key.as_str(), ask.holder.as_str());
                if own > 0 {
                    table.insert(entry, (own, ask.now.saturating_add(ask.ttl_secs))).map_err(db_err)?;
                } else {
                    table.remove(entry).map_err(db_err)?;
                }
                // No resource changed: the revision stays put.
                Ok((SlotLease { granted, held: u32::try_from(own).unwrap_or(u32::MAX) }, Vec::new()))
            })
            .await?;
        Ok(lease)
    }
}
