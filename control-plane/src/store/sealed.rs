//! A `Store` that keeps upstream keys sealed (`secrets`): it seals a
//! channel's key on its way in and opens it on its way out, so the backend
//! (Redis hash or redb file) only ever holds ciphertext when a master key is
//! configured, while every reader in the control plane sees plain keys.
//! Everything else passes through untouched. A modification that leaves a
//! key as it was keeps the stored ciphertext, so an unchanged resource
//! writes nothing.

use std::{collections::HashMap, sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use tokio::sync::watch;

use super::{
    Budget, BudgetStore, Charged, Lease, LeaseAsk, Modified, PageCursor, Patch, Result, SnapshotPage, Store,
    StoreError, VideoFilter, VideoStore, VideoWrite,
};
use crate::{
    domain::secrets::{Keyring, sealed_with},
    domain::{Change, Channel, Kind, Resource, Snapshot, UsageFilter, UsageOutcome, UsagePage, UsageRecord, VideoTask},
};

/// `inner` with its channels' keys sealed under `keys`' current key.
pub struct SealedStore {
    inner: Arc<dyn Store>,
    keys: Arc<ArcSwap<Keyring>>,
}

/// What `SealedStore::inspect` found among the stored keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Upstream keys (a channel's `api_key` or pool keys) stored in plain text.
    pub plain: usize,
    /// Upstream keys sealed under the current master key.
    pub current: usize,
    /// Upstream keys sealed under another key of the ring.
    pub older: usize,
}

/// Every secret of `channel` with what its seal is bound to: `api_key` to
/// the channel id, each pool key to the channel id and its key id.
fn slots(channel: &mut Channel) -> Vec<(String, &mut String)> {
    let mut slots = vec![(channel.id.clone(), &mut channel.api_key)];
    for key in &mut channel.keys {
        slots.push((format!("{}/{}", channel.id, key.id), &mut key.key));
    }
    slots
}

// === impl SealedStore ===

impl SealedStore {
    pub fn new(inner: Arc<dyn Store>, keys: Keyring) -> SealedStore {
        SealedStore { inner, keys: Arc::new(ArcSwap::from_pointee(keys)) }
    }

    /// The ring in use.
    pub fn keys(&self) -> Arc<Keyring> {
        self.keys.load_full()
    }

    /// Counts stored keys by how they are kept; fails when one cannot be
    /// opened with the ring (sealed under a key it lacks, or tampered).
    pub async fn inspect(&self) -> Result<Inventory> {
        let keys = self.keys.load();
        let mut inventory = Inventory::default();
        for resource in self.inner.list(Kind::Channel).await? {
            let Resource::Channel(mut channel) = resource else { continue };
            let id = channel.id.clone();
            for (binding, stored) in slots(&mut channel) {
                keys.open(&binding, stored).map_err(|source| StoreError::Sealed { id: id.clone(), source })?;
                match sealed_with(stored) {
                    _ if stored.is_empty() => {}
                    None => inventory.plain += 1,
                    Some(key) if Some(key) == keys.current_id() => inventory.current += 1,
                    Some(_) => inventory.older += 1,
                }
            }
        }
        Ok(inventory)
    }

    /// Makes `keys` the ring in use (a rotation to a new current key), then
    /// seals every stored key that is not yet sealed under its current key.
    /// Returns how many were re-sealed. Fails without a current key, or when
    /// a stored key cannot be opened (nothing after it is re-sealed).
    pub async fn reseal_all(&self, keys: Keyring) -> Result<usize> {
        if keys.current_id().is_none() {
            return Err(StoreError::Rejected { reason: "no master key is configured on this replica".into() });
        }
        let keys = Arc::new(keys);
        self.keys.store(keys.clone());
        let mut resealed = 0;
        for resource in self.inner.list(Kind::Channel).await? {
            let Resource::Channel(channel) = resource else { continue };
            let ring = keys.clone();
            let patch: Patch = Box::new(move |resource| {
                let Resource::Channel(channel) = resource else { return Ok(()) };
                let id = channel.id.clone();
                for (binding, stored) in slots(channel) {
                    if let Some(sealed) =
                        ring.reseal(&binding, stored).map_err(|source| StoreError::Sealed { id: id.clone(), source })?
                    {
                        *stored = sealed;
                    }
                }
                Ok(())
            });
            match self.inner.modify(Kind::Channel, &channel.id, patch).await {
                Ok(modified) => resealed += usize::from(modified.revision.is_some()),
                Err(StoreError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(resealed)
    }

    fn seal(&self, resource: &mut Resource) {
        if let Resource::Channel(channel) = resource {
            let keys = self.keys.load();
            for (binding, stored) in slots(channel) {
                *stored = keys.seal(&binding, stored);
            }
        }
    }

    fn open(&self, resource: &mut Resource) -> Result<()> {
        if let Resource::Channel(channel) = resource {
            let keys = self.keys.load();
            let id = channel.id.clone();
            for (binding, stored) in slots(channel) {
                *stored =
                    keys.open(&binding, stored).map_err(|source| StoreError::Sealed { id: id.clone(), source })?;
            }
        }
        Ok(())
    }

    fn open_all(&self, mut resources: Vec<Resource>) -> Result<Vec<Resource>> {
        for resource in &mut resources {
            self.open(resource)?;
        }
        Ok(resources)
    }
}

#[async_trait]
impl Store for SealedStore {
    async fn revision(&self) -> Result<u64> {
        self.inner.revision().await
    }

    async fn create(&self, mut resource: Resource) -> Result<u64> {
        self.seal(&mut resource);
        self.inner.create(resource).await
    }

    async fn import_tokens(&self, tokens: Vec<crate::domain::Token>) -> Result<super::Imported> {
        // Tokens hold no upstream key: nothing to seal.
        self.inner.import_tokens(tokens).await
    }

    async fn modify(&self, kind: Kind, id: &str, mut patch: Patch) -> Result<Modified> {
        let keys = self.keys.clone();
        let sealing: Patch = Box::new(move |resource| {
            let Resource::Channel(channel) = resource else { return patch(resource) };
            let keys = keys.load();
            let id = channel.id.clone();
            // Each slot's stored text and plain key, by what it is bound to.
            let mut before = HashMap::new();
            for (binding, stored) in slots(channel) {
                let plain =
                    keys.open(&binding, stored).map_err(|source| StoreError::Sealed { id: id.clone(), source })?;
                before.insert(binding, (std::mem::replace(stored, plain.clone()), plain));
            }
            patch(resource)?;
            if let Resource::Channel(channel) = resource {
                for (binding, slot) in slots(channel) {
                    *slot = match before.remove(&binding) {
                        Some((stored, plain)) if *slot == plain => stored,
                        _ => keys.seal(&binding, slot),
                    };
                }
            }
            Ok(())
        });
        let mut modified = self.inner.modify(kind, id, sealing).await?;
        self.open(&mut modified.resource)?;
        Ok(modified)
    }

    async fn delete(&self, kind: Kind, id: &str) -> Result<u64> {
        self.inner.delete(kind, id).await
    }

    async fn get(&self, kind: Kind, id: &str) -> Result<Option<Resource>> {
        let mut resource = self.inner.get(kind, id).await?;
        if let Some(resource) = resource.as_mut() {
            self.open(resource)?;
        }
        Ok(resource)
    }

    async fn list(&self, kind: Kind) -> Result<Vec<Resource>> {
        self.open_all(self.inner.list(kind).await?)
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let snapshot = self.inner.snapshot().await?;
        Ok(Snapshot { revision: snapshot.revision, resources: self.open_all(snapshot.resources)? })
    }

    async fn count(&self) -> Result<u64> {
        self.inner.count().await
    }

    async fn snapshot_page(&self, cursor: &PageCursor, size: usize) -> Result<SnapshotPage> {
        let page = self.inner.snapshot_page(cursor, size).await?;
        Ok(SnapshotPage { resources: self.open_all(page.resources)?, next: page.next })
    }

    async fn changes_since(&self, revision: u64) -> Result<Option<Vec<Change>>> {
        self.inner.changes_since(revision).await
    }

    async fn get_many(&self, refs: &[(Kind, String)]) -> Result<Vec<Option<Resource>>> {
        let mut found = self.inner.get_many(refs).await?;
        for resource in found.iter_mut().flatten() {
            self.open(resource)?;
        }
        Ok(found)
    }

    async fn adjust_balance(&self, account_id: &str, delta_micros: i64) -> Result<Resource> {
        self.inner.adjust_balance(account_id, delta_micros).await
    }

    async fn apply_usage(&self, records: &[UsageRecord]) -> Result<UsageOutcome> {
        self.inner.apply_usage(records).await
    }

    async fn list_usage_page(&self, filter: &UsageFilter) -> Result<UsagePage> {
        self.inner.list_usage_page(filter).await
    }

    async fn take_permits(&self, key: &str, window_start: i64, window_secs: i64, limit: u32, want: u32) -> Result<u32> {
        self.inner.take_permits(key, window_start, window_secs, limit, want).await
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.subscribe()
    }
}

#[async_trait]
impl VideoStore for SealedStore {
    async fn create_video(&self, task: &VideoTask) -> Result<bool> {
        self.inner.create_video(task).await
    }

    async fn get_video(&self, id: &str) -> Result<Option<VideoTask>> {
        self.inner.get_video(id).await
    }

    async fn update_video(&self, task: &VideoTask) -> Result<VideoWrite> {
        self.inner.update_video(task).await
    }

    async fn list_videos(&self, filter: &VideoFilter) -> Result<Vec<VideoTask>> {
        self.inner.list_videos(filter).await
    }

    async fn open_videos(&self, limit: usize) -> Result<Vec<VideoTask>> {
        self.inner.open_videos(limit).await
    }

    async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.inner.try_lock(name, holder, ttl).await
    }

    async fn unlock(&self, name: &str, holder: &str) -> Result<()> {
        self.inner.unlock(name, holder).await
    }
}

#[async_trait]
impl BudgetStore for SealedStore {
    async fn lease(&self, ask: &LeaseAsk) -> Result<Lease> {
        self.inner.lease(ask).await
    }

    async fn release(&self, budget: &Budget, holder: &str, amount: i64) -> Result<()> {
        self.inner.release(budget, holder, amount).await
    }

    async fn charge(&self, record: &UsageRecord, now: i64) -> Result<Charged> {
        self.inner.charge(record, now).await
    }

    async fn window_spent(&self, budget: &Budget, buckets: &[String]) -> Result<i64> {
        self.inner.window_spent(budget, buckets).await
    }
}

// The parts of a store that hold no upstream key pass straight through.

#[async_trait]
impl super::SlotStore for SealedStore {
    async fn lease_slots(&self, ask: &super::SlotAsk) -> Result<super::SlotLease> {
        self.inner.lease_slots(ask).await
    }
}

#[async_trait]
impl super::LineageStore for SealedStore {
    async fn lineage(&self) -> Result<super::Lineage> {
        self.inner.lineage().await
    }

    async fn confirm_lineage(&self) -> Result<super::Lineage> {
        self.inner.confirm_lineage().await
    }

    async fn persistence(&self) -> Result<super::Persistence> {
        self.inner.persistence().await
    }
}

#[async_trait]
impl super::FleetStore for SealedStore {
    async fn put_data_plane(&self, record: &crate::domain::DataPlane) -> Result<()> {
        self.inner.put_data_plane(record).await
    }

    async fn list_data_planes(&self) -> Result<Vec<crate::domain::DataPlane>> {
        self.inner.list_data_planes().await
    }

    async fn remove_data_plane(&self, node_id: &str) -> Result<bool> {
        self.inner.remove_data_plane(node_id).await
    }
}

#[async_trait]
impl super::RollupStore for SealedStore {
    async fn rollups(&self, period: super::rollup::Period, from: i64, to: i64) -> Result<Vec<super::rollup::Row>> {
        self.inner.rollups(period, from, to).await
    }

    async fn prune(&self, now: i64) -> Result<super::rollup::Pruned> {
        self.inner.prune(now).await
    }
}

#[async_trait]
impl super::AccessStore for SealedStore {
    async fn create_credential(&self, credential: &crate::domain::access::Credential) -> Result<()> {
        self.inner.create_credential(credential).await
    }

    async fn get_credential(&self, id: &str) -> Result<Option<crate::domain::access::Credential>> {
        self.inner.get_credential(id).await
    }

    async fn credential_by_key(&self, key_hash: &str) -> Result<Option<crate::domain::access::Credential>> {
        self.inner.credential_by_key(key_hash).await
    }

    async fn list_credentials(&self) -> Result<Vec<crate::domain::access::Credential>> {
        self.inner.list_credentials().await
    }

    async fn rekey_credential(
        &self,
        id: &str,
        key_hash: &str,
        key_prefix: &str,
        at: i64,
    ) -> Result<crate::domain::access::Credential> {
        self.inner.rekey_credential(id, key_hash, key_prefix, at).await
    }

    async fn delete_credential(&self, id: &str) -> Result<()> {
        self.inner.delete_credential(id).await
    }

    async fn touch_credential(&self, id: &str, at: i64) -> Result<()> {
        self.inner.touch_credential(id, at).await
    }

    async fn append_audit(&self, entry: &crate::domain::access::AuditEntry) -> Result<u64> {
        self.inner.append_audit(entry).await
    }

    async fn list_audit(
        &self,
        filter: &crate::domain::access::AuditFilter,
    ) -> Result<crate::domain::access::AuditPage> {
        self.inner.list_audit(filter).await
    }
}
