//! The fleet registry in the embedded store: the `fleet` table, node id →
//! JSON record.

use async_trait::async_trait;
use redb::{ReadableTable as _, TableDefinition};

use super::{EmbeddedStore, db_err, decode, encode};
use crate::domain::DataPlane;
use crate::store::Result;
use crate::store::fleet::FleetStore;

const FLEET: TableDefinition<&str, &[u8]> = TableDefinition::new("fleet");

#[async_trait]
impl FleetStore for EmbeddedStore {
    async fn put_data_plane(&self, record: &DataPlane) -> Result<()> {
        let json = encode(record)?;
        let node = record.node_id.clone();
        self.write(move |txn| {
            txn.open_table(FLEET).map_err(db_err)?.insert(node.as_str(), json.as_slice()).map_err(db_err)?;
            Ok(((), Vec::new()))
        })
        .await?;
        Ok(())
    }

    async fn list_data_planes(&self) -> Result<Vec<DataPlane>> {
        self.read(|txn| {
            let table = match txn.open_table(FLEET) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(error) => return Err(db_err(error)),
            };
            let mut records = Vec::new();
            for entry in table.iter().map_err(db_err)? {
                let (_, json) = entry.map_err(db_err)?;
                records.push(decode::<DataPlane>(json.value())?);
            }
            Ok(records)
        })
        .await
    }

    async fn remove_data_plane(&self, node_id: &str) -> Result<bool> {
        let node = node_id.to_owned();
        let (removed, _) = self
            .write(move |txn| {
                let removed = txn.open_table(FLEET).map_err(db_err)?.remove(node.as_str()).map_err(db_err)?.is_some();
                Ok((removed, Vec::new()))
            })
            .await?;
        Ok(removed)
    }
}
