//! The lineage in the embedded store: the `lineage` table, `id` → the id and
//! `confirmed` → "1" or "0", read and created in one write transaction.

use async_trait::async_trait;
use redb::{ReadableTable as _, TableDefinition};

use super::{EmbeddedStore, db_err};
use crate::store::Result;
use crate::store::lineage::{self, Lineage, LineageStore, Persistence};

const LINEAGE: TableDefinition<&str, &str> = TableDefinition::new("lineage");

#[async_trait]
impl LineageStore for EmbeddedStore {
    async fn lineage(&self) -> Result<Lineage> {
        let held = self
            .read(|txn| {
                let table = match txn.open_table(LINEAGE) {
                    Ok(table) => table,
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                    Err(error) => return Err(db_err(error)),
                };
                let id = table.get("id").map_err(db_err)?.map(|v| v.value().to_owned());
                let confirmed = table.get("confirmed").map_err(db_err)?.is_some_and(|v| v.value() == "1");
                Ok(id.map(|id| Lineage { id, confirmed }))
            })
            .await?;
        if let Some(lineage) = held {
            return Ok(lineage);
        }
        let (lineage, _) = self
            .write(|txn| {
                let mut table = txn.open_table(LINEAGE).map_err(db_err)?;
                let id = table.get("id").map_err(db_err)?.map(|v| v.value().to_owned());
                let lineage = match id {
                    Some(id) => {
                        let confirmed = table.get("confirmed").map_err(db_err)?.is_some_and(|v| v.value() == "1");
                        Lineage { id, confirmed }
                    }
                    None => {
                        let lineage = Lineage { id: lineage::new_id(), confirmed: false };
                        table.insert("id", lineage.id.as_str()).map_err(db_err)?;
                        table.insert("confirmed", "0").map_err(db_err)?;
                        lineage
                    }
                };
                Ok((lineage, Vec::new()))
            })
            .await?;
        Ok(lineage)
    }

    async fn confirm_lineage(&self) -> Result<Lineage> {
        let (lineage, _) = self
            .write(|txn| {
                let mut table = txn.open_table(LINEAGE).map_err(db_err)?;
                let lineage = Lineage { id: lineage::new_id(), confirmed: true };
                table.insert("id", lineage.id.as_str()).map_err(db_err)?;
                table.insert("confirmed", "1").map_err(db_err)?;
                Ok((lineage, Vec::new()))
            })
            .await?;
        Ok(lineage)
    }

    async fn persistence(&self) -> Result<Persistence> {
        Ok(Persistence::Durable)
    }
}
