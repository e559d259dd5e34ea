//! The store's part of the fleet registry: one record per data plane, as
//! the replica holding its watch stream last wrote it. Plain upserts: the
//! newest write wins, and heartbeats rewrite a live data plane's record every
//! few seconds, so a record left behind by a replica that died is corrected
//! or ages into "gone".

use async_trait::async_trait;

use super::Result;
use crate::domain::DataPlane;

#[async_trait]
pub trait FleetStore: Send + Sync {
    /// Writes `record`, replacing the one of its node id.
    async fn put_data_plane(&self, record: &DataPlane) -> Result<()>;

    /// Every record, by node id.
    async fn list_data_planes(&self) -> Result<Vec<DataPlane>>;

    /// Forgets `node_id`; false when there was no such record.
    async fn remove_data_plane(&self, node_id: &str) -> Result<bool>;
}

/// Checks every backend passes (run from `store::conformance`).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use std::sync::Arc;

    use crate::domain::DataPlane;
    use crate::store::Store;

    /// Records round-trip, list by node id, are replaced whole and removed.
    pub async fn run(store: Arc<dyn Store>) {
        let record = |node: &str, replica: &str| DataPlane {
            node_id: node.into(),
            address: "10.0.0.1:8080".into(),
            replica: replica.into(),
            acked_revision: 7,
            last_seen: 1_800_000_000,
            connected: true,
            spool_backlog: 3,
            requests_per_second: 12.5,
            ..DataPlane::default()
        };
        store.put_data_plane(&record("fleet-b", "cp-1")).await.expect("put");
        store.put_data_plane(&record("fleet-a", "cp-1")).await.expect("put");
        store.put_data_plane(&record("fleet-b", "cp-2")).await.expect("put again");
        let listed: Vec<DataPlane> = store
            .list_data_planes()
            .await
            .expect("list")
            .into_iter()
            .filter(|d| d.node_id.starts_with("fleet-"))
            .collect();
        assert_eq!(listed, vec![record("fleet-a", "cp-1"), record("fleet-b", "cp-2")], "by node id, newest write");
        assert!(store.remove_data_plane("fleet-a").await.expect("remove"));
        assert!(!store.remove_data_plane("fleet-a").await.expect("remove again"), "a second remove finds nothing");
        let left = store.list_data_planes().await.expect("list");
        assert!(left.iter().all(|d| d.node_id != "fleet-a"), "removed record still listed");
    }
}
