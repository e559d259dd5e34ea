//! The fleet registry on Redis: the hash `gw:fleet`, node id → JSON record.

use async_trait::async_trait;
use redis::AsyncCommands as _;

use super::layout::FLEET;
use super::{RedisStore, decode};
use crate::domain::DataPlane;
use crate::store::fleet::FleetStore;
use crate::store::{Result, StoreError};

#[async_trait]
impl FleetStore for RedisStore {
    async fn put_data_plane(&self, record: &DataPlane) -> Result<()> {
        let json = serde_json::to_string(record).map_err(StoreError::Corrupt)?;
        self.conn.clone().hset(FLEET, &record.node_id, json).await.map_err(StoreError::Redis)
    }

    async fn list_data_planes(&self) -> Result<Vec<DataPlane>> {
        let all: Vec<(String, String)> = self.conn.clone().hgetall(FLEET).await.map_err(StoreError::Redis)?;
        let mut records = all.iter().map(|(_, json)| decode::<DataPlane>(json)).collect::<Result<Vec<_>>>()?;
        records.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        Ok(records)
    }

    async fn remove_data_plane(&self, node_id: &str) -> Result<bool> {
        let removed: i64 = self.conn.clone().hdel(FLEET, node_id).await.map_err(StoreError::Redis)?;
        Ok(removed > 0)
    }
}
