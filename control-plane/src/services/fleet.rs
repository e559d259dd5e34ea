//! The fleet registry: every data plane that any replica streams policy to,
//! kept in the store so that every replica lists the same fleet.
//!
//! This replica writes the records of the data planes whose watch streams it
//! holds, from one writer task that always writes a node's newest state: on
//! connect, on each ACK and heartbeat (data planes send one every few
//! seconds), and on disconnect (only while the record is still this
//! replica's: the data plane may have moved on). A record not refreshed for
//! `GONE_AFTER_SECS` is gone — its data plane or its replica died — and is
//! left out of the live count until it calls again or is removed.
//!
//! Each open watch stream binds its connection to the node id of its hello
//! (`Sessions`): a data plane makes every call over the one connection its
//! watch uses, so a report is from the node whose session holds the
//! connection it came on, whatever node it names.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::{Notify, mpsc, watch};

use crate::domain::{DataPlane, now_unix};
use crate::store::{Store, StoreError};

/// Why the fleet registry could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A data plane silent this long (no heartbeat, ACK or call) is gone: three
/// missed heartbeats.
pub const GONE_AFTER_SECS: i64 = 15;
/// How often the live count is read back from the store.
const REFRESH: Duration = Duration::from_secs(5);

/// How a listed data plane is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its watch stream is open and it was heard from lately.
    Connected,
    /// It closed its watch stream.
    Disconnected,
    /// Not heard from for `GONE_AFTER_SECS`.
    Gone,
}

/// The registry as one replica sees and writes it.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    /// This replica's name in the records it writes.
    replica: String,
    /// The data planes whose streams this replica holds (or held).
    local: Mutex<BTreeMap<String, DataPlane>>,
    writes: mpsc::UnboundedSender<String>,
    /// Live data planes of the whole fleet, as last read from the store.
    live: AtomicUsize,
    sessions: Sessions,
}

/// The watch sessions open on this replica, by the connection they came on.
#[derive(Default)]
struct Sessions {
    open: Mutex<HashMap<SocketAddr, Arc<Session>>>,
    /// Woken whenever a session opens.
    opened: Notify,
}

/// One data plane's watch session, as calls on its connection see it.
#[derive(Debug)]
pub struct Session {
    /// The node id of its hello (its certificate's, under mutual TLS).
    pub node_id: String,
    /// The lowest revision the data plane can have served under since the
    /// session began: what its hello held, else the first snapshot sent.
    base: AtomicU64,
}

/// Keeps a session bound to its connection until dropped.
pub struct Binding {
    inner: std::sync::Weak<Inner>,
    remote: SocketAddr,
    session: Arc<Session>,
}

// === impl Liveness ===

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Connected => "connected",
            Liveness::Disconnected => "disconnected",
            Liveness::Gone => "gone",
        }
    }
}

// === impl Fleet ===

impl Fleet {
    /// A registry writing to `store` as `replica`; spawns its writer task and
    /// the refresh of the live count, which end with `shutdown`.
    pub fn start(store: Arc<dyn Store>, replica: String, shutdown: watch::Receiver<bool>) -> Fleet {
        let (writes, queued) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            store,
            replica,
            local: Mutex::default(),
            writes,
            live: AtomicUsize::new(0),
            sessions: Sessions::default(),
        });
        tokio::spawn(write_loop(Arc::downgrade(&inner), queued));
        tokio::spawn(refresh_loop(Arc::downgrade(&inner), shutdown));
        Fleet { inner }
    }

    /// Records a newly opened watch stream of a data plane that holds
    /// `revision` (0 for nothing) of this store: that counts as acknowledged.
    pub fn connected(&self, node_id: &str, address: &str, version: &str, revision: u64) {
        let now = now_unix();
        let replica = self.inner.replica.clone();
        self.update(node_id, true, |n| {
            n.address = address.to_owned();
            n.version = version.to_owned();
            n.replica = replica;
            n.connected = true;
            n.connected_at = now;
            n.last_seen = now;
            n.acked_revision = revision;
            n.sent_revision = revision;
            n.last_error.clear();
        });
    }

    pub fn sent(&self, node_id: &str, revision: u64) {
        self.update(node_id, false, |n| n.sent_revision = revision);
    }

    /// Records an ACK, or a NACK when `error` is not empty.
    pub fn acked(&self, node_id: &str, revision: u64, error: &str) {
        let now = now_unix();
        self.update(node_id, true, |n| {
            n.acked_revision = n.acked_revision.max(revision);
            n.last_error = error.to_owned();
            n.last_seen = now;
        });
    }

    /// Records a heartbeat.
    pub fn heartbeat(&self, node_id: &str, spool_backlog: u64, requests_per_second: f64) {
        let now = now_unix();
        self.update(node_id, true, |n| {
            n.spool_backlog = spool_backlog;
            n.requests_per_second = requests_per_second;
            n.last_seen = now;
        });
    }

    /// Notes a call from `node_id` (written with its next heartbeat).
    pub fn seen(&self, node_id: &str) {
        let now = now_unix();
        self.update(node_id, false, |n| n.last_seen = now);
    }

    pub fn disconnected(&self, node_id: &str) {
        let now = now_unix();
        self.update(node_id, true, |n| {
            n.connected = false;
            n.last_seen = now;
        });
    }

    /// How many data planes hold a watch stream open on this replica.
    pub fn connected_count(&self) -> usize {
        self.local().values().filter(|n| n.connected).count()
    }

    /// How many data planes the whole fleet has live (at least this
    /// replica's own), as of the last refresh.
    pub fn live_count(&self) -> usize {
        self.inner.live.load(Ordering::Relaxed).max(self.connected_count())
    }

    /// The data planes of this replica, by node id.
    pub fn list(&self) -> Vec<DataPlane> {
        self.local().values().cloned().collect()
    }

    /// Every data plane of the fleet, by node id, with how it is doing.
    pub async fn registry(&self) -> Result<Vec<(DataPlane, Liveness)>, FleetError> {
        let now = now_unix();
        let records = self.inner.store.list_data_planes().await?;
        Ok(records
            .into_iter()
            .map(|record| {
                let liveness = liveness(&record, now);
                (record, liveness)
            })
            .collect())
    }

    /// Forgets `node_id`; false when the registry has no such data plane.
    pub async fn remove(&self, node_id: &str) -> Result<bool, FleetError> {
        self.local().remove(node_id);
        Ok(self.inner.store.remove_data_plane(node_id).await?)
    }

    /// Binds connection `remote` to the watch session of `node_id`, which
    /// held `base` (0: nothing) when it began, until the binding is
    /// dropped. A newer session on the same connection takes its place.
    pub fn bind(&self, remote: SocketAddr, node_id: &str, base: u64) -> Binding {
        let session = Arc::new(Session { node_id: node_id.to_owned(), base: AtomicU64::new(base) });
        self.inner.sessions.open.lock().unwrap_or_else(|e| e.into_inner()).insert(remote, session.clone());
        self.inner.sessions.opened.notify_waiters();
        Binding { inner: Arc::downgrade(&self.inner), remote, session }
    }

    /// The session bound to connection `remote`, waiting up to `wait` for
    /// one to open (a data plane that reconnected may call before its
    /// hello arrives); `None` when none did.
    pub async fn session_on(&self, remote: SocketAddr, wait: Duration) -> Option<Arc<Session>> {
        let sessions = &self.inner.sessions;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let opened = sessions.opened.notified();
            if let Some(session) = sessions.open.lock().unwrap_or_else(|e| e.into_inner()).get(&remote) {
                return Some(session.clone());
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return None;
            }
        }
    }

    fn local(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, DataPlane>> {
        self.inner.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the local record of `node_id` with `f`; `write` queues it
    /// for the store.
    fn update(&self, node_id: &str, write: bool, f: impl FnOnce(&mut DataPlane)) {
        {
            let mut local = self.local();
            let node = local
                .entry(node_id.to_owned())
                .or_insert_with(|| DataPlane { node_id: node_id.to_owned(), ..DataPlane::default() });
            f(node);
        }
        if write {
            let _ = self.inner.writes.send(node_id.to_owned());
        }
    }
}

// === impl Session ===

impl Session {
    /// The lowest revision the data plane can have admitted a request of
    /// this session under (0 when it held nothing yet).
    pub fn base(&self) -> u64 {
        self.base.load(Ordering::Relaxed)
    }
}

// === impl Binding ===

impl Binding {
    /// Notes that the data plane was sent `revision`: when its hello held
    /// nothing, that is the oldest policy its session serves under.
    pub fn sent(&self, revision: u64) {
        let _ = self.session.base.compare_exchange(0, revision, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else { return };
        let mut open = inner.sessions.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.get(&self.remote).is_some_and(|s| Arc::ptr_eq(s, &self.session)) {
            open.remove(&self.remote);
        }
    }
}

/// How `record` is doing at `now`.
pub fn liveness(record: &DataPlane, now: i64) -> Liveness {
    if now - record.last_seen > GONE_AFTER_SECS {
        Liveness::Gone
    } else if record.connected {
        Liveness::Connected
    } else {
        Liveness::Disconnected
    }
}

/// This replica's name in fleet records: its listen address, with the
/// host name in place of an unspecified IP (every pod listens on 0.0.0.0).
pub fn replica_name(listen: SocketAddr) -> String {
    if listen.ip().is_unspecified() {
        let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
        let host = host.or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_owned()));
        format!("{}:{}", host.unwrap_or_else(|| "localhost".to_owned()), listen.port())
    } else {
        listen.to_string()
    }
}

/// Writes each queued node's newest local record; a disconnect only while
/// the stored record is still this replica's session, and then forgets it.
async fn write_loop(inner: std::sync::Weak<Inner>, mut queued: mpsc::UnboundedReceiver<String>) {
    while let Some(node_id) = queued.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let record = inner.local.lock().unwrap_or_else(|e| e.into_inner()).get(&node_id).cloned();
        let Some(record) = record else { continue };
        let result = if record.connected {
            inner.store.put_data_plane(&record).await
        } else {
            disconnect(&inner, &record).await
        };
        if let Err(error) = result {
            tracing::debug!(node = %node_id, %error, "fleet registry write failed; the next heartbeat retries");
        }
    }
}

async fn disconnect(inner: &Inner, record: &DataPlane) -> Result<(), StoreError> {
    let stored = inner.store.list_data_planes().await?.into_iter().find(|r| r.node_id == record.node_id);
    let ours = stored.is_none_or(|s| s.replica == record.replica && s.connected_at == record.connected_at);
    if ours {
        inner.store.put_data_plane(record).await?;
    }
    let mut local = inner.local.lock().unwrap_or_else(|e| e.into_inner());
    if local.get(&record.node_id).is_some_and(|n| !n.connected) {
        local.remove(&record.node_id);
    }
    Ok(())
}

/// Reads the live count back from the store every `REFRESH`.
async fn refresh_loop(inner: std::sync::Weak<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(REFRESH);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        if let Ok(records) = inner.store.list_data_planes().await {
            let now = now_unix();
            let live = records.iter().filter(|r| liveness(r, now) == Liveness::Connected).count();
            inner.live.store(live, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn a_record_not_refreshed_is_gone() {
        let record = DataPlane { connected: true, last_seen: 1_000, ..DataPlane::default() };
        assert_eq!(liveness(&record, 1_000 + GONE_AFTER_SECS), Liveness::Connected);
        assert_eq!(liveness(&record, 1_001 + GONE_AFTER_SECS), Liveness::Gone);
        let closed = DataPlane { connected: false, ..record };
        assert_eq!(liveness(&closed, 1_005), Liveness::Disconnected);
    }

    #[tokio::test]
    async fn a_connection_is_its_watchs_node_until_the_watch_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::EmbeddedStore::open(&dir.path().join("store.redb")).unwrap();
        let (_stop, shutdown) = watch::channel(false);
        let fleet = Fleet::start(Arc::new(store), "r1".into(), shutdown);
        let (one, two): (SocketAddr, SocketAddr) = ("10.0.0.1:5000".parse().unwrap(), "10.0.0.2:5000".parse().unwrap());
        let wait = Duration::from_millis(100);
        assert!(fleet.session_on(one, wait).await.is_none(), "no watch yet");

        // A call waits for the hello of a watch on its connection.
        let late = tokio::spawn({
            let fleet = fleet.clone();
            async move { fleet.session_on(one, Duration::from_secs(2)).await.map(|s| s.node_id.clone()) }
        });
        tokio::task::yield_now().await;
        let first = fleet.bind(one, "dp-1", 0);
        assert_eq!(late.await.unwrap().as_deref(), Some("dp-1"));
        assert!(fleet.session_on(two, wait).await.is_none(), "another connection is nobody");

        // The first snapshot sent is where a session that held nothing begins.
        first.sent(7);
        first.sent(9);
        assert_eq!(fleet.session_on(one, wait).await.unwrap().base(), 7);

        // A newer watch on the connection takes it; the old one ending leaves it so.
        let second = fleet.bind(one, "dp-1b", 12);
        drop(first);
        assert_eq!(fleet.session_on(one, wait).await.unwrap().node_id, "dp-1b");
        drop(second);
        assert!(fleet.session_on(one, wait).await.is_none(), "the watch ended");
    }

    #[test]
    fn replicas_on_an_unspecified_address_are_named_by_host() {
        assert_eq!(replica_name("10.0.0.10:7070".parse().unwrap()), "10.0.0.10:7070");
        let named = replica_name("0.0.0.0:7070".parse().unwrap());
        assert!(named.ends_with(":7070") && !named.starts_with("0.0.0.0"), "{named}");
    }
}
