//! Upstream keys sealed at rest (`domain::secrets`), written once for both
//! backends: a backend seals a channel's keys as it writes the channel and
//! opens them as it reads it, so Redis or the redb file only ever hold
//! ciphertext when a master key is configured, while every reader above the
//! store sees plain keys. A rewrite that leaves a key as it was keeps its
//! stored text while that is sealed under the current key; otherwise the
//! key is sealed under the current key, which is how `reseal_all` rotates.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Patch, Result, Store, StoreError};
use crate::domain::{
    Channel, Kind, Resource,
    secrets::{Keyring, sealed_with},
};

/// The ring a backend seals and opens upstream keys with; cheap to clone,
/// and every clone sees a rotation (`reseal_all`). The default ring has no
/// key: keys are kept as they come.
#[derive(Clone, Default)]
pub struct Sealing {
    keys: Arc<ArcSwap<Keyring>>,
}

/// What `inspect` found among the stored keys.
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

// === impl Sealing ===

impl Sealing {
    pub fn new(keys: Keyring) -> Sealing {
        Sealing { keys: Arc::new(ArcSwap::from_pointee(keys)) }
    }

    /// The ring in use.
    pub fn keys(&self) -> Arc<Keyring> {
        self.keys.load_full()
    }

    /// Seals every key of a channel about to be written for the first time.
    pub fn seal(&self, resource: &mut Resource) {
        if let Resource::Channel(channel) = resource {
            let keys = self.keys.load();
            for (binding, stored) in slots(channel) {
                *stored = keys.seal(&binding, stored);
            }
        }
    }

    /// Seals the keys of `next`, the plain form of a channel about to
    /// replace `stored` (as written): a key whose plain text is unchanged
    /// keeps its stored text while that is sealed under the current key (or
    /// the ring has none), so rewriting an unchanged channel writes the same
    /// bytes.
    pub fn seal_over(&self, next: &mut Resource, stored: &Resource) {
        let (Resource::Channel(next), Resource::Channel(stored)) = (next, stored) else {
            return;
        };
        let keys = self.keys.load();
        let mut stored = stored.clone();
        let before: Vec<(String, String)> =
            slots(&mut stored).into_iter().map(|(binding, text)| (binding, text.clone())).collect();
        for (binding, plain) in slots(next) {
            let kept = before.iter().find(|(b, _)| *b == binding).map(|(_, text)| text.as_str());
            let keep = match kept {
                Some(text) if keys.current_id().is_none() || sealed_with(text) == keys.current_id() => {
                    keys.open(&binding, text).ok().as_deref() == Some(plain.as_str())
                }
                _ => false,
            };
            *plain = if keep { kept.unwrap_or_default().to_owned() } else { keys.seal(&binding, plain) };
        }
    }

    /// Opens every key of a channel as read; `Sealed` when one does not
    /// open with the ring (sealed under a key it lacks, or tampered).
    pub fn open(&self, resource: &mut Resource) -> Result<()> {
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

    /// `open` on each of `resources`.
    pub fn open_all(&self, resources: &mut [Resource]) -> Result<()> {
        resources.iter_mut().try_for_each(|resource| self.open(resource))
    }
}

/// Counts the keys `store` holds by how they are kept; fails when one
/// cannot be opened with `sealing`'s ring.
pub async fn inspect(store: &dyn Store, sealing: &Sealing) -> Result<Inventory> {
    let keys = sealing.keys();
    let mut inventory = Inventory::default();
    for resource in store.list_stored(Kind::Channel).await? {
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
/// rewrites every channel with a key not yet sealed under it, which seals
/// it so (`Sealing::seal_over`). Returns how many channels were rewritten.
/// Fails without a current key, or when a stored key cannot be opened
/// (nothing after it is re-sealed).
pub async fn reseal_all(store: &dyn Store, sealing: &Sealing, keys: Keyring) -> Result<usize> {
    if keys.current_id().is_none() {
        return Err(StoreError::Rejected { reason: "no master key is configured on this replica".into() });
    }
    sealing.keys.store(Arc::new(keys));
    let mut resealed = 0;
    for resource in store.list_stored(Kind::Channel).await? {
        let unchanged: Patch = Box::new(|_| Ok(()));
        match store.modify(Kind::Channel, resource.id(), unchanged).await {
            Ok(modified) => resealed += usize::from(modified.revision.is_some()),
            Err(StoreError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(resealed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use crate::domain::secrets::MasterKey;
    use crate::store::{EmbeddedStore, conformance};

    fn ring(byte: u8, previous: &[u8]) -> Keyring {
        let key = |b: u8| MasterKey::parse(&hex::encode([b; 32])).unwrap();
        Keyring::new(Some(key(byte)), previous.iter().map(|b| key(*b)).collect())
    }

    fn stored_key(resources: &[Resource]) -> String {
        match &resources[0] {
            Resource::Channel(channel) => channel.api_key.clone(),
            other => panic!("not a channel: {other:?}"),
        }
    }

    fn set_weight(weight: u32) -> Patch {
        Box::new(move |resource| {
            if let Resource::Channel(channel) = resource {
                channel.weight = weight;
            }
            Ok(())
        })
    }

    #[tokio::test]
    async fn keys_are_sealed_as_written_opened_as_read_and_resealed_only_when_stale() {
        let dir = tempfile::tempdir().unwrap();
        let sealing = Sealing::new(ring(1, &[]));
        let store = EmbeddedStore::open(&dir.path().join("store.redb")).unwrap().with_sealing(sealing.clone());
        let channel = conformance::sample(Kind::Channel, "ch-seal");
        let Resource::Channel(plain) = &channel else { unreachable!() };
        let plain_key = plain.api_key.clone();
        assert!(!plain_key.is_empty());
        store.create(channel.clone()).await.unwrap();

        let first = stored_key(&store.list_stored(Kind::Channel).await.unwrap());
        assert_eq!(sealed_with(&first), sealing.keys().current_id(), "written sealed: {first}");
        assert_eq!(stored_key(&store.list(Kind::Channel).await.unwrap()), plain_key, "read plain");
        let got = store.get(Kind::Channel, "ch-seal").await.unwrap().unwrap();
        assert_eq!(stored_key(&[got]), plain_key);

        // Another field changes: the key keeps its stored text.
        let modified = store.modify(Kind::Channel, "ch-seal", set_weight(7)).await.unwrap();
        assert!(modified.revision.is_some());
        assert_eq!(stored_key(&[modified.resource]), plain_key, "modify answers plain keys");
        assert_eq!(stored_key(&store.list_stored(Kind::Channel).await.unwrap()), first);
        let inventory = inspect(&store, &sealing).await.unwrap();
        assert_eq!(inventory, Inventory { plain: 0, current: 1, older: 0 });

        // A rotation rewrites the channel under the new key, once.
        assert_eq!(reseal_all(&store, &sealing, ring(2, &[1])).await.unwrap(), 1);
        let rotated = stored_key(&store.list_stored(Kind::Channel).await.unwrap());
        assert_ne!(rotated, first);
        assert_eq!(sealed_with(&rotated), sealing.keys().current_id());
        assert_eq!(stored_key(&store.list(Kind::Channel).await.unwrap()), plain_key);
        assert_eq!(reseal_all(&store, &sealing, ring(2, &[1])).await.unwrap(), 0, "nothing stale is left");

        // A ring without the key the store was sealed under cannot open it.
        let stranger = Sealing::new(ring(3, &[]));
        assert!(matches!(inspect(&store, &stranger).await, Err(StoreError::Sealed { .. })));
    }

    #[tokio::test]
    async fn a_rewrite_seals_keys_kept_plain_or_under_an_older_key() {
        let dir = tempfile::tempdir().unwrap();
        let sealing = Sealing::default();
        let store = EmbeddedStore::open(&dir.path().join("store.redb")).unwrap().with_sealing(sealing.clone());
        store.create(conformance::sample(Kind::Channel, "ch-plain")).await.unwrap();
        let kept = stored_key(&store.list_stored(Kind::Channel).await.unwrap());
        assert_eq!(sealed_with(&kept), None, "no master key: kept plain");
        assert_eq!(inspect(&store, &sealing).await.unwrap(), Inventory { plain: 1, current: 0, older: 0 });

        sealing.keys.store(Arc::new(ring(1, &[])));
        store.modify(Kind::Channel, "ch-plain", set_weight(3)).await.unwrap();
        let sealed = stored_key(&store.list_stored(Kind::Channel).await.unwrap());
        assert_eq!(sealed_with(&sealed), sealing.keys().current_id(), "sealed by the next write");
        assert_eq!(stored_key(&store.list(Kind::Channel).await.unwrap()), kept);
        let unchanged = store.modify(Kind::Channel, "ch-plain", set_weight(3)).await.unwrap();
        assert_eq!(unchanged.revision, None, "an unchanged channel writes nothing");
    }
}
