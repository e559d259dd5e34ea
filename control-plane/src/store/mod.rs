//! Where the control plane keeps its state: a trait and two backends that
//! pass one conformance suite (`conformance`).
//!
//! Every write bumps one global revision and appends `kind/id` to a change
//! feed, atomically with the write, so that watchers can be sent the deltas
//! since any revision the feed still holds. `subscribe` tells about new
//! revisions, including ones written by other control-plane replicas.

pub mod budget;
pub mod conformance;
pub mod embedded;
pub mod redis;
pub mod video;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::domain::{Change, Kind, Resource, Snapshot, UsageFilter, UsageOutcome, UsageRecord};

pub use self::budget::{Budget, BudgetStore, Charged, Lease, LeaseAsk};
pub use self::embedded::EmbeddedStore;
pub use self::redis::RedisStore;
pub use self::video::{VideoFilter, VideoStore, VideoWrite};

/// How long a usage record may be applied after it was made (by its
/// `created_at`): the ledger refuses older records, and remembers every
/// applied request id for longer than this, so no resend is charged twice.
pub const IDEMPOTENCY_WINDOW_SECS: i64 = 30 * 24 * 60 * 60;
/// How long an applied request id is remembered: the window and a day.
pub const APPLIED_TTL_SECS: u64 = 31 * 24 * 60 * 60;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} {id:?} not found")]
    NotFound { kind: Kind, id: String },
    #[error("{kind} {id:?} already exists")]
    AlreadyExists { kind: Kind, id: String },
    #[error("redis")]
    Redis(#[source] ::redis::RedisError),
    #[error("embedded store")]
    Embedded(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("stored data is corrupt")]
    Corrupt(#[source] serde_json::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The control plane's state. Implementations are cheap to share (`Arc`).
#[async_trait]
pub trait Store: VideoStore + BudgetStore + Send + Sync + 'static {
    /// The newest revision; 0 for an empty store.
    async fn revision(&self) -> Result<u64>;

    /// Stores a new resource; `AlreadyExists` when its id is taken. The
    /// counters it carries (balance, used) are its starting values.
    async fn create(&self, resource: Resource) -> Result<u64>;

    /// Replaces an existing resource; `NotFound` when absent. Counters
    /// (account balance and used, token used) keep their stored values.
    async fn update(&self, resource: Resource) -> Result<u64>;

    /// Removes a resource; `NotFound` when absent. Returns the new revision.
    async fn delete(&self, kind: Kind, id: &str) -> Result<u64>;

    /// One resource with its current counters, or `None`.
    async fn get(&self, kind: Kind, id: &str) -> Result<Option<Resource>>;

    /// Every resource of a kind, ordered by id.
    async fn list(&self, kind: Kind) -> Result<Vec<Resource>>;

    /// Every resource and the revision they are at, read consistently.
    async fn snapshot(&self) -> Result<Snapshot>;

    /// The changes after `revision`, oldest first, one entry per revision and
    /// resource; `None` when the feed no longer reaches back that far.
    async fn changes_since(&self, revision: u64) -> Result<Option<Vec<Change>>>;

    /// Adds `delta_micros` (negative deducts) to an account's balance.
    async fn adjust_balance(&self, account_id: &str, delta_micros: i64) -> Result<Resource>;

    /// Applies each record once per request id, atomically with the token's
    /// and account's counters, and takes its cost out of the leases its
    /// `node_id` holds of both; records whose id was seen are counted as
    /// duplicates and change nothing. Records of unknown tokens or accounts
    /// are still logged and charged where the other side exists. Spending is
    /// not policy: the revision does not change.
    async fn apply_usage(&self, records: &[UsageRecord]) -> Result<UsageOutcome>;

    /// Usage records, newest first, filtered.
    async fn list_usage(&self, filter: &UsageFilter) -> Result<Vec<UsageRecord>>;

    /// Rate-limit permits: atomically grants `min(want, limit - granted)`,
    /// where `granted` is what `key` was granted in the fixed window that
    /// starts at Unix second `window_start` and lasts `window_secs`, and
    /// records the grant. Concurrent callers (any replica) together never get
    /// more than `limit` for one key and window. A window's count is kept for
    /// at least the window's length past its end, then forgotten.
    async fn take_permits(&self, key: &str, window_start: i64, window_secs: i64, limit: u32, want: u32) -> Result<u32>;

    /// The newest revision, updated whenever any writer (this process or
    /// another replica on the same backend) commits a change.
    fn subscribe(&self) -> watch::Receiver<u64>;
}

/// Opens the store named by `url`: `redis://…` (or `rediss://…`) for Redis,
/// anything else (or empty) is the embedded store in `data_dir`.
pub async fn open(url: &str, data_dir: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    use anyhow::Context as _;
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        let store = RedisStore::connect(url).await.context("connecting to redis")?;
        Ok(Arc::new(store))
    } else {
        let path = if url.is_empty() || url == "embedded" {
            data_dir.join("store.redb")
        } else {
            std::path::PathBuf::from(url.strip_prefix("file://").unwrap_or(url))
        };
        let store = EmbeddedStore::open(&path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Arc::new(store))
    }
}
