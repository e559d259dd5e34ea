//! The store's lineage: an identity written once when a store is first
//! used, so that a store that lost its data (an empty Redis after a restart
//! without persistence) or went back in time (an old backup) can be told
//! from the one the fleet was fed from.
//!
//! A lineage created on first use is unconfirmed; `confirm` replaces it with
//! a new, confirmed one when an operator says the store as it is now is the
//! truth. Data planes holding a snapshot of another lineage accept a
//! confirmed one only.

use async_trait::async_trait;

use super::Result;

/// A store's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage {
    /// Random, 32 hex digits; never reused.
    pub id: String,
    /// An operator confirmed this store as the truth.
    pub confirmed: bool,
}

/// Whether the store keeps its data across a restart of its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// An append-only file, snapshots or both (Redis).
    Aof,
    Rdb,
    AofAndRdb,
    /// Nothing is written to disk: a restart loses everything.
    None,
    /// Every commit is on disk (the embedded store).
    Durable,
    /// The server does not say (`CONFIG` is disabled, as on some managed
    /// services).
    Unknown,
}

/// The lineage part of a store.
#[async_trait]
pub trait LineageStore: Send + Sync {
    /// The store's lineage, created (unconfirmed) atomically on first call
    /// when the store has none: every replica sees the same one.
    async fn lineage(&self) -> Result<Lineage>;

    /// Replaces the lineage with a new confirmed one and returns it.
    async fn confirm_lineage(&self) -> Result<Lineage>;

    /// How the store persists its data.
    async fn persistence(&self) -> Result<Persistence>;

    /// Whether the store may drop keys of its own accord when it fills up
    /// (Redis's `maxmemory-policy`); stores that never do keep the default.
    async fn eviction(&self) -> Result<Eviction> {
        Ok(Eviction::Never)
    }

    /// The oldest server version among the store's servers, as (major,
    /// minor), when it runs on servers that have one and says (Redis's
    /// `INFO server`); `None` otherwise.
    async fn server_version(&self) -> Result<Option<(u32, u32)>> {
        Ok(None)
    }
}

/// The version in an `INFO server` answer (`redis_version:7.0.15`), as
/// (major, minor).
pub fn redis_version(info: &str) -> Option<(u32, u32)> {
    let version = info.lines().find_map(|line| line.trim().strip_prefix("redis_version:"))?;
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// What a store does with its keys when it fills up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// It refuses writes instead (Redis's `noeviction`).
    Never,
    /// It evicts keys by the policy named (on a cluster, the first primary's
    /// that does).
    Evicts(String),
    /// It does not say (Redis's `CONFIG GET` is refused).
    Unknown,
}

/// A new lineage id.
pub fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

// === impl Persistence ===

impl Persistence {
    /// The name `gwctl store status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Persistence::Aof => "aof",
            Persistence::Rdb => "rdb",
            Persistence::AofAndRdb => "aof+rdb",
            Persistence::None => "none",
            Persistence::Durable => "durable",
            Persistence::Unknown => "unknown",
        }
    }

    /// From Redis's `appendonly` and `save` settings.
    pub fn of_redis(appendonly: &str, save: &str) -> Persistence {
        match (appendonly.eq_ignore_ascii_case("yes"), !save.trim().is_empty()) {
            (true, true) => Persistence::AofAndRdb,
            (true, false) => Persistence::Aof,
            (false, true) => Persistence::Rdb,
            (false, false) => Persistence::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_settings_name_the_persistence() {
        assert_eq!(Persistence::of_redis("no", ""), Persistence::None);
        assert_eq!(Persistence::of_redis("yes", ""), Persistence::Aof);
        assert_eq!(Persistence::of_redis("no", "3600 1 300 100"), Persistence::Rdb);
        assert_eq!(Persistence::of_redis("YES", "60 1"), Persistence::AofAndRdb);
    }

    #[test]
    fn the_redis_version_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(redis_version(info), Some((7, 0)));
        assert_eq!(redis_version("redis_version:6.0.9\r\n"), Some((6, 0)));
        assert!(redis_version("redis_version:6.0.9\r\n") < Some((6, 2)));
        assert!(redis_version("redis_version:10.0.0\r\n") > Some((6, 2)));
        assert_eq!(redis_version("# Server\r\nuptime:1\r\n"), None);
    }

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}

/// Checks every backend passes (run from `store::conformance`).
#[cfg(any(test, feature = "conformance"))]
pub mod conformance {
    use std::sync::Arc;

    use crate::store::Store;

    /// A lineage is stable until confirmed; confirming makes a new one.
    pub async fn run(store: Arc<dyn Store>) {
        let first = store.lineage().await.expect("lineage");
        assert_eq!(store.lineage().await.expect("lineage again"), first, "the lineage changed without a confirm");
        let confirmed = store.confirm_lineage().await.expect("confirm");
        assert!(confirmed.confirmed, "a confirmed lineage says so");
        assert_ne!(confirmed.id, first.id, "confirming makes a new id");
        assert_eq!(store.lineage().await.expect("lineage after confirm"), confirmed, "the confirmed lineage is kept");
        store.persistence().await.expect("persistence");
        // A store on servers with versions tells one the gateway runs on.
        if let Some(version) = store.server_version().await.expect("version") {
            assert!(version >= (6, 2), "the test servers are older than the gateway needs: {version:?}");
        }
    }

    /// Two replicas asking at once for the lineage of a store that has none
    /// agree on one.
    pub async fn run_shared(a: Arc<dyn Store>, b: Arc<dyn Store>) {
        let (one, other) = tokio::join!(a.lineage(), b.lineage());
        assert_eq!(one.expect("lineage via a"), other.expect("lineage via b"), "replicas disagree on the lineage");
    }
}
