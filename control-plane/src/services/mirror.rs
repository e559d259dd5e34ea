//! The replica's copy of the policy state as data planes get it, held in
//! memory and kept current from the store's change feed, so that a full
//! snapshot is served without reading (and parsing) the whole store again:
//! at a million tokens that read is most of a data plane's sync.
//!
//! One task loads the store page by page, then follows it: on every new
//! revision it reads the changed resources, as a watch session does. Each
//! resource is kept encoded (a few hundred bytes as a message, about half
//! of that encoded). The copy is labelled with the store lineage and the
//! revision it holds; it is dropped and loaded again when the store changes
//! lineage, goes back in time or no longer holds the feed since its
//! revision, and it is not served while it is loading or the store fails.
//! A session then reads the store itself, as it did before this copy.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use tokio::{sync::watch, task::JoinHandle};

use crate::{
    domain::error_chain,
    domain::{Change, Kind, Resource},
    store::{PageCursor, Store, StoreError},
};

/// How long a full sync waits for a load under way before it reads the
/// store itself.
const AWAIT_LOAD: Duration = Duration::from_secs(30);
/// Resources read per page while loading.
const PAGE: usize = 5_000;
/// How often the lineage is checked when no revision arrives (an operator's
/// confirm changes the lineage without a write).
const RECHECK: Duration = Duration::from_secs(2);
/// Wait before loading again after a store error.
const RETRY: Duration = Duration::from_secs(1);

/// How the copy holds a resource: as the bytes sessions send, so that a
/// snapshot costs no encoding (the API layer supplies it).
pub type Encode = fn(Resource) -> Arc<[u8]>;

/// The shared copy; cheap to clone.
#[derive(Clone)]
pub struct Mirror {
    state: Arc<RwLock<Option<Held>>>,
    encode: Encode,
    /// True while a load is under way.
    loading: Arc<watch::Sender<bool>>,
}

/// The loaded copy: per kind (in `Kind::ALL` order), id → encoded resource.
struct Held {
    lineage: String,
    revision: u64,
    kinds: [HashMap<String, Arc<[u8]>>; Kind::ALL.len()],
}

/// Every resource at one revision, taken from the copy at once.
pub struct Frozen {
    pub revision: u64,
    resources: Vec<Arc<[u8]>>,
}

// === impl Mirror ===

impl Default for Mirror {
    /// A copy that is never loaded.
    fn default() -> Mirror {
        Mirror { state: Arc::default(), encode: |_| Arc::from([]), loading: Arc::new(watch::channel(false).0) }
    }
}

impl Mirror {
    /// Spawns the task that loads and follows `store`, holding each
    /// resource as `encode` makes it; the task ends when `shutdown` turns
    /// true.
    pub fn start(store: Arc<dyn Store>, encode: Encode, shutdown: watch::Receiver<bool>) -> (Mirror, JoinHandle<()>) {
        let mirror = Mirror { encode, ..Mirror::default() };
        mirror.loading.send_replace(true);
        let task = tokio::spawn(mirror.clone().follow(store, shutdown));
        (mirror, task)
    }

    /// The whole state of `lineage`, when the copy holds that lineage at a
    /// revision the store (now at `store_revision`) has not gone below.
    pub fn freeze(&self, lineage: &str, store_revision: u64) -> Option<Frozen> {
        let state = self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let copy = state.as_ref().filter(|c| c.lineage == lineage && c.revision <= store_revision)?;
        let resources = copy.kinds.iter().flat_map(|kind| kind.values().cloned()).collect();
        Some(Frozen { revision: copy.revision, resources })
    }

    /// Waits (up to 30 s) for a load under way to end, so that a data plane
    /// starting beside a control plane that is loading gets the copy
    /// instead of a second read of the whole store competing with it.
    pub async fn loaded(&self) {
        let mut loading = self.loading.subscribe();
        let _ = tokio::time::timeout(AWAIT_LOAD, loading.wait_for(|busy| !*busy)).await;
    }

    /// The revision the copy holds; `None` while it is not loaded.
    pub fn revision(&self) -> Option<u64> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner()).as_ref().map(|c| c.revision)
    }

    fn set(&self, copy: Option<Held>) {
        *self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = copy;
    }

    async fn follow(self, store: Arc<dyn Store>, mut shutdown: watch::Receiver<bool>) {
        let mut revisions = store.subscribe();
        loop {
            let run = async {
                self.set(None);
                self.loading.send_replace(true);
                let loaded = load(store.as_ref(), &self).await;
                self.loading.send_replace(false);
                let (lineage, revision) = loaded?;
                tracing::info!(revision, "policy state held in memory for full syncs");
                loop {
                    tokio::select! {
                        changed = revisions.changed() => {
                            if changed.is_err() {
                                return Ok(false);
                            }
                        }
                        () = tokio::time::sleep(RECHECK) => {}
                    }
                    if !self.catch_up(store.as_ref(), &lineage).await? {
                        return Ok::<bool, StoreError>(true);
                    }
                }
            };
            let again = tokio::select! {
                result = run => result,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            match again {
                Ok(true) => tracing::info!("the store changed lineage or went back: loading the policy state again"),
                Ok(false) => return,
                Err(error) => {
                    self.set(None);
                    tracing::warn!(error = %error_chain(&error), "following the store for full syncs failed; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Applies what the store changed since the copy's revision; `false`
    /// when the copy must be loaded again (another lineage, a revision
    /// below the copy's, a feed that no longer reaches back).
    async fn catch_up(&self, store: &dyn Store, lineage: &str) -> Result<bool, StoreError> {
        let now = store.lineage().await?;
        let revision = store.revision().await?;
        let Some(held) = self.revision() else {
            return Ok(false);
        };
        if now.id != lineage || revision < held {
            return Ok(false);
        }
        if revision == held {
            return Ok(true);
        }
        let Some(changes) = store.changes_since(held).await? else {
            return Ok(false);
        };
        let Some(newest) = changes.iter().map(|c| c.revision).max() else {
            return Ok(true);
        };
        let touched = touched(changes);
        let found = store.get_many(&touched).await?;
        let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(copy) = state.as_mut() else {
            return Ok(false);
        };
        for ((kind, id), resource) in touched.into_iter().zip(found) {
            let slot = &mut copy.kinds[index(kind)];
            match resource {
                Some(resource) => {
                    slot.insert(id, (self.encode)(resource));
                }
                None => {
                    slot.remove(&id);
                }
            }
        }
        copy.revision = newest;
        Ok(true)
    }
}

/// Reads the whole store into the mirror; returns the lineage and the
/// revision read before the first page (resources written meanwhile may be
/// newer, never older, and come again with the next catch-up).
async fn load(store: &dyn Store, mirror: &Mirror) -> Result<(String, u64), StoreError> {
    let lineage = store.lineage().await?.id;
    let revision = store.revision().await?;
    let mut kinds: [HashMap<String, Arc<[u8]>>; Kind::ALL.len()] = Default::default();
    let mut cursor = Some(PageCursor::default());
    while let Some(at) = cursor {
        let page = store.snapshot_page(&at, PAGE).await?;
        for resource in page.resources {
            kinds[index(resource.kind())].insert(resource.id().to_owned(), (mirror.encode)(resource));
        }
        cursor = page.next;
    }
    mirror.set(Some(Held { lineage: lineage.clone(), revision, kinds }));
    Ok((lineage, revision))
}

/// The distinct resources a batch of changes touched.
pub fn touched(changes: Vec<Change>) -> Vec<(Kind, String)> {
    let set: std::collections::BTreeSet<(Kind, String)> = changes.into_iter().map(|c| (c.kind, c.id)).collect();
    set.into_iter().collect()
}

fn index(kind: Kind) -> usize {
    Kind::ALL.iter().position(|k| *k == kind).unwrap_or_default()
}

// === impl Frozen ===

impl Frozen {
    pub fn len(&self) -> usize {
        self.resources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// The encoded resources in parts of at most `chunk`.
    pub fn chunks(&self, chunk: usize) -> impl Iterator<Item = &[Arc<[u8]>]> + '_ {
        self.resources.chunks(chunk.max(1))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::store::{EmbeddedStore, conformance};

    async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let start = Instant::now();
        loop {
            if let Some(found) = check() {
                return found;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "waited 10 s for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The tests' encoding: a resource's id.
    fn id_of(resource: Resource) -> Arc<[u8]> {
        resource.id().as_bytes().into()
    }

    fn ids(frozen: &Frozen) -> Vec<String> {
        let mut ids: Vec<String> =
            frozen.chunks(2).flatten().map(|bytes| String::from_utf8(bytes.to_vec()).unwrap()).collect();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn the_copy_follows_every_write_and_is_served_only_for_its_own_lineage_and_past() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("store.redb")).unwrap());
        store.create(conformance::account("acc-1", 1_000)).await.unwrap();
        store.create(conformance::token("tok-1", "acc-1")).await.unwrap();
        let (stop, stopped) = watch::channel(false);
        let (mirror, task) = Mirror::start(store.clone(), id_of, stopped);
        let lineage = store.lineage().await.unwrap();

        let loaded = until("the load", || mirror.freeze(&lineage.id, 2)).await;
        assert_eq!((loaded.revision, ids(&loaded)), (2, vec!["acc-1".to_owned(), "tok-1".to_owned()]));

        // Later writes arrive as the change feed has them.
        store.create(conformance::token("tok-2", "acc-1")).await.unwrap();
        let revision = store.delete(Kind::Token, "tok-1").await.unwrap();
        let followed =
            until("the writes", || mirror.freeze(&lineage.id, revision).filter(|f| f.revision == revision)).await;
        assert_eq!(ids(&followed), vec!["acc-1".to_owned(), "tok-2".to_owned()]);

        assert!(mirror.freeze("another-lineage", revision).is_none(), "another store's data planes read the store");
        assert!(mirror.freeze(&lineage.id, revision - 1).is_none(), "a store that went back is not papered over");

        // An operator's confirm gives the store a new lineage without a
        // write: the copy is loaded again under it.
        let confirmed = store.confirm_lineage().await.unwrap();
        let again = until("the new lineage", || mirror.freeze(&confirmed.id, revision)).await;
        assert_eq!(ids(&again), vec!["acc-1".to_owned(), "tok-2".to_owned()]);
        assert!(mirror.freeze(&lineage.id, revision).is_none());

        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    }
}
