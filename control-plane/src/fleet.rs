//! What this replica knows of the data planes it streams policy to: which
//! revision each was sent and acknowledged, and when it was last heard from.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use crate::domain::now_unix;

/// One data plane as last seen by this replica.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataPlane {
    pub node_id: String,
    pub address: String,
    pub version: String,
    pub acked_revision: u64,
    pub sent_revision: u64,
    pub connected_at: i64,
    pub last_seen: i64,
    pub connected: bool,
    pub last_error: String,
}

/// Shared registry of data planes, keyed by node id.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    nodes: Arc<Mutex<BTreeMap<String, DataPlane>>>,
}

// === impl Fleet ===

impl Fleet {
    /// Records a newly opened watch stream.
    pub fn connected(&self, node_id: &str, address: &str, version: &str) {
        let now = now_unix();
        self.with(node_id, |n| {
            n.address = address.to_owned();
            n.version = version.to_owned();
            n.connected = true;
            n.connected_at = now;
            n.last_seen = now;
        });
    }

    pub fn sent(&self, node_id: &str, revision: u64) {
        self.with(node_id, |n| n.sent_revision = revision);
    }

    /// Records an ACK, or a NACK when `error` is not empty.
    pub fn acked(&self, node_id: &str, revision: u64, error: &str) {
        let now = now_unix();
        self.with(node_id, |n| {
            n.acked_revision = n.acked_revision.max(revision);
            n.last_error = error.to_owned();
            n.last_seen = now;
        });
    }

    pub fn seen(&self, node_id: &str) {
        let now = now_unix();
        self.with(node_id, |n| n.last_seen = now);
    }

    pub fn disconnected(&self, node_id: &str) {
        let now = now_unix();
        self.with(node_id, |n| {
            n.connected = false;
            n.last_seen = now;
        });
    }

    /// How many data planes hold a watch stream open now.
    pub fn connected_count(&self) -> usize {
        self.nodes.lock().map(|nodes| nodes.values().filter(|n| n.connected).count()).unwrap_or(0)
    }

    /// Every data plane seen since this replica started, by node id.
    pub fn list(&self) -> Vec<DataPlane> {
        self.nodes.lock().map(|nodes| nodes.values().cloned().collect()).unwrap_or_default()
    }

    fn with(&self, node_id: &str, f: impl FnOnce(&mut DataPlane)) {
        if let Ok(mut nodes) = self.nodes.lock() {
            let node = nodes
                .entry(node_id.to_owned())
                .or_insert_with(|| DataPlane { node_id: node_id.to_owned(), ..DataPlane::default() });
            f(node);
        }
    }
}
