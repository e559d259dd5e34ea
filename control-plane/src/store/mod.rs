//! Where the control plane keeps its state: a trait and two backends that
//! pass one conformance suite (`conformance`).
//!
//! Every write bumps one global revision and appends `kind/id` to a change
//! feed, atomically with the write, so that watchers can be sent the deltas
//! since any revision the feed still holds. `subscribe` tells about new
//! revisions, including ones written by other control-plane replicas.
//!
//! Existing resources change only through `modify`, a read-modify-write that
//! each backend makes atomic per resource, so that concurrent edits of one
//! resource (from any replica) never undo one another.
//!
//! Account and channel names are unique per kind, checked inside the same
//! atomic write as the create or rename (groups and models are named by
//! their ids). Duplicates written before that rule stay readable. A token's
//! key hash is unique across the store the same way (an index key hash →
//! token id on both backends), so one key never opens two tokens.

pub mod access;
pub mod batch;
pub mod budget;
pub mod codec;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod console;
pub mod embedded;
pub mod fleet;
pub mod lineage;
pub mod redis;
pub mod rollup;
pub mod seal;
pub mod slots;
pub mod video;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::domain::{Change, Kind, Resource, Snapshot, Token, UsageFilter, UsageOutcome, UsagePage, UsageRecord};

pub use self::access::AccessStore;
pub use self::batch::{BatchFilter, BatchStore, BatchWrite};
pub use self::budget::{Budget, BudgetStore, Charged, Lease, LeaseAsk};
pub use self::console::ConsoleStore;
pub use self::embedded::EmbeddedStore;
pub use self::fleet::FleetStore;
pub use self::lineage::{Eviction, Lineage, LineageStore, Persistence};
pub use self::redis::RedisStore;
pub use self::rollup::{Retention, RollupStore};
pub use self::seal::Sealing;
pub use self::slots::{SlotAsk, SlotLease, SlotStore};
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
    /// A channel's pool has no key of the id.
    #[error("channel {channel:?} has no key {key:?}")]
    NoKey { channel: String, key: String },
    #[error("{kind} {id:?} already exists")]
    AlreadyExists { kind: Kind, id: String },
    /// Another resource of the kind has the name (`owner`, when known).
    #[error("{kind} name {name:?} is taken{}", owner.as_deref().map(|id| format!(" by {id}")).unwrap_or_default())]
    NameTaken { kind: Kind, name: String, owner: Option<String> },
    /// A usage cursor that no longer points into the log.
    #[error("usage cursor {cursor:?} is invalid or expired; list again from the start")]
    BadCursor { cursor: String },
    #[error("redis")]
    Redis(#[source] ::redis::RedisError),
    #[error("embedded store")]
    Embedded(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("stored data is corrupt")]
    Corrupt(#[source] serde_json::Error),
    /// A `Patch` refused the change it was asked to make; nothing was written.
    #[error("{reason}")]
    Rejected { reason: String },
    #[error("credential {id:?} not found")]
    NoCredential { id: String },
    #[error("credential {id:?} already exists")]
    CredentialExists { id: String },
    /// Another credential's secret hashes the same.
    #[error("the key is already in use by another credential")]
    KeyTaken,
    /// A channel's stored key does not open with the configured master keys.
    #[error("the key of channel {id:?} cannot be opened with the configured master keys")]
    Sealed {
        id: String,
        #[source]
        source: crate::domain::secrets::SealError,
    },
    /// Another token (`owner`) has the same key hash.
    #[error("the key is already in use by token {owner:?}")]
    TokenKeyTaken { owner: String },
    /// Another row of the same import has the same key hash.
    #[error("the key is already in use by an earlier row of the import")]
    TokenKeyRepeated,
    #[error("user {id:?} not found")]
    NoUser { id: String },
    #[error("user {id:?} already exists")]
    UserExists { id: String },
    #[error("user name {name:?} is taken")]
    UserNameTaken { name: String },
    #[error("top-up code {id:?} not found")]
    NoCode { id: String },
    /// A new code's id or code hash is taken.
    #[error("top-up code {id:?} already exists")]
    CodeExists { id: String },
    /// Other writers kept changing the resource while `modify` tried to.
    #[error("{kind} {id:?} kept changing concurrently; try again")]
    Contended { kind: Kind, id: String },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl From<crate::domain::BadCursor> for StoreError {
    fn from(bad: crate::domain::BadCursor) -> StoreError {
        StoreError::BadCursor { cursor: bad.cursor }
    }
}

/// A change to one stored resource, for `Store::modify`. It gets the
/// resource as currently stored (counters included) and edits it in place,
/// or fails to refuse the change (`StoreError::Rejected` by convention). It
/// may run more than once, each time on a fresh read, so it must set fields
/// from what it captured, never accumulate state of its own between runs.
pub type Patch = Box<dyn FnMut(&mut Resource) -> Result<()> + Send>;

/// What `Store::modify` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Modified {
    /// The revision of the write; `None` when the patch left the resource as
    /// it was, in which case nothing was written and no revision was used.
    pub revision: Option<u64>,
    /// The resource as written (or as found, when unchanged), with the
    /// counters it had when the patch ran.
    pub resource: Resource,
}

/// What `Store::import_tokens` did: the revision of the write (`None` when
/// no row was written) and, per row in order, why it was refused (`None`
/// when written).
#[derive(Debug, Default)]
pub struct Imported {
    pub revision: Option<u64>,
    pub rows: Vec<Option<StoreError>>,
}

/// The control plane's state. Implementations are cheap to share (`Arc`).
/// Where a snapshot read in pages goes on: the kind (an index into
/// `Kind::ALL`) and a position within it that only the store understands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageCursor {
    pub kind: usize,
    pub position: String,
}

/// One page of a snapshot read in pages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SnapshotPage {
    pub resources: Vec<Resource>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<PageCursor>,
}

#[async_trait]
pub trait Store:
    VideoStore
    + BatchStore
    + BudgetStore
    + SlotStore
    + LineageStore
    + FleetStore
    + RollupStore
    + AccessStore
    + ConsoleStore
    + Send
    + Sync
    + 'static
{
    /// The newest revision; 0 for an empty store.
    async fn revision(&self) -> Result<u64>;

    /// Stores a new resource; `AlreadyExists` when its id is taken. The
    /// counters it carries (balance, used) are its starting values.
    async fn create(&self, resource: Resource) -> Result<u64>;

    /// Creates many tokens in one atomic write at one revision, with a
    /// change-feed entry per token written. Each row is refused on its own,
    /// writing nothing of it: `AlreadyExists` for a taken id,
    /// `TokenKeyTaken` for a key hash a stored token has,
    /// `TokenKeyRepeated` for one an earlier row has. Counters start at the
    /// values the tokens carry.
    async fn import_tokens(&self, tokens: Vec<Token>) -> Result<Imported>;

    /// Changes the stored resource `kind/id` with `patch`, atomically: the
    /// patch sees the current value and its result is written only if no
    /// other write of that resource (from any replica) came in between, so
    /// concurrent modifications of different fields all survive. Counters
    /// (account balance and used, token used) keep their stored values
    /// whatever the patch does to them, so a concurrent charge is never
    /// undone. The write bumps the revision and appends to the change feed,
    /// atomically with it; a patch that changes nothing writes nothing.
    ///
    /// Fails with `NotFound` when absent, with the patch's error when it
    /// refuses (nothing written), with `Rejected` when the patch changed the
    /// id, and with `Contended` when other writers won every one of a
    /// bounded number of attempts.
    async fn modify(&self, kind: Kind, id: &str, patch: Patch) -> Result<Modified>;

    /// Removes a resource; `NotFound` when absent. Returns the new revision.
    async fn delete(&self, kind: Kind, id: &str) -> Result<u64>;

    /// One resource with its current counters, or `None`.
    async fn get(&self, kind: Kind, id: &str) -> Result<Option<Resource>>;

    /// Every resource of a kind, ordered by id.
    async fn list(&self, kind: Kind) -> Result<Vec<Resource>>;

    /// `list` as the backend holds it: upstream keys as stored, sealed
    /// (`seal`), for checking and rotating the seal; `list` opens them.
    async fn list_stored(&self, kind: Kind) -> Result<Vec<Resource>>;

    /// Every resource and the revision they are at, read consistently.
    async fn snapshot(&self) -> Result<Snapshot>;

    /// One page of about `size` resources (with their counters) of a
    /// snapshot read in pages, starting at `cursor` (`PageCursor::default()`
    /// first), and the cursor of the next page, `None` after the last. The
    /// pages are not one consistent read: every resource is in them, each as
    /// of some moment after the read began, and one may come twice. Callers
    /// read the revision before the first page and send the changes after it
    /// on top. Stores without paged reads answer `snapshot()` in one page.
    async fn snapshot_page(&self, cursor: &PageCursor, size: usize) -> Result<SnapshotPage> {
        let _ = (cursor, size);
        Ok(SnapshotPage { resources: self.snapshot().await?.resources, next: None })
    }

    /// About how many resources of every kind there are (0: not known), to
    /// size what a snapshot is read into.
    async fn count(&self) -> Result<u64> {
        Ok(0)
    }

    /// The changes after `revision`, oldest first, one entry per revision and
    /// resource; `None` when the feed no longer reaches back that far.
    async fn changes_since(&self, revision: u64) -> Result<Option<Vec<Change>>>;

    /// Each of `refs` with its current counters, or `None`, in their order;
    /// stores that can read them in one round trip do.
    async fn get_many(&self, refs: &[(Kind, String)]) -> Result<Vec<Option<Resource>>> {
        let mut found = Vec::with_capacity(refs.len());
        for (kind, id) in refs {
            found.push(self.get(*kind, id).await?);
        }
        Ok(found)
    }

    /// Adds `delta_micros` (negative deducts) to an account's balance.
    async fn adjust_balance(&self, account_id: &str, delta_micros: i64) -> Result<Resource>;

    /// Applies each record once per request id, atomically with the token's
    /// and account's counters, and takes its cost out of the leases its
    /// `node_id` holds of both; records whose id was seen are counted as
    /// duplicates and change nothing. Records of unknown tokens or accounts
    /// are still logged and charged where the other side exists. Spending is
    /// not policy: the revision does not change.
    async fn apply_usage(&self, records: &[UsageRecord]) -> Result<UsageOutcome>;

    /// Usage records, newest first, filtered: one page of at most
    /// `filter.limit` (0: 100) records after `filter.cursor`. A page reads a
    /// bounded number of records, so it may hold fewer than the limit and
    /// still have a `next`. `BadCursor` when the cursor is not one this store
    /// gave out or its record left the log.
    async fn list_usage_page(&self, filter: &UsageFilter) -> Result<UsagePage>;

    /// The first page of `list_usage_page`'s records.
    async fn list_usage(&self, filter: &UsageFilter) -> Result<Vec<UsageRecord>> {
        Ok(self.list_usage_page(filter).await?.items)
    }

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

/// Usage records read at most per `list_usage_page` call.
pub const USAGE_SCAN: usize = 100_000;

/// The name a resource must not share with another of its kind: accounts'
/// and channels' (groups and models are named by their ids, unique anyway).
pub fn unique_name(resource: &Resource) -> Option<&str> {
    match resource {
        Resource::Account(account) => Some(account.name.as_str()),
        Resource::Channel(channel) => Some(channel.name.as_str()),
        Resource::Group(_) | Resource::Token(_) | Resource::Model(_) => None,
    }
    .filter(|name| !name.is_empty())
}

/// The key hash of a token, unique across tokens (`None` for other kinds
/// and for a token without one).
pub fn token_key(resource: &Resource) -> Option<&str> {
    match resource {
        Resource::Token(token) if !token.key_hash.is_empty() => Some(token.key_hash.as_str()),
        _ => None,
    }
}

/// `Rejected` when a patch turned `kind/id` into another resource.
pub fn check_same_id(patched: &Resource, kind: Kind, id: &str) -> Result<()> {
    if patched.kind() == kind && patched.id() == id {
        Ok(())
    } else {
        Err(StoreError::Rejected { reason: format!("a patch may not change the id of {kind} {id:?}") })
    }
}

/// Whether the kind's names are unique (`unique_name`).
pub fn names_are_unique(kind: Kind) -> bool {
    matches!(kind, Kind::Account | Kind::Channel)
}

/// Whether `record` passes `filter` (empty fields match anything).
pub fn usage_matches(filter: &UsageFilter, record: &UsageRecord) -> bool {
    let is = |want: &str, have: &str| want.is_empty() || want == have;
    is(&filter.token_id, &record.token_id)
        && is(&filter.account_id, &record.account_id)
        && is(&filter.model, &record.model)
        && is(&filter.group, &record.group)
        && is(&filter.channel_id, &record.channel_id)
        && (filter.from == 0 || record.created_at >= filter.from)
        && (filter.to == 0 || record.created_at < filter.to)
}

/// Whether no record applied before `record` can pass `filter.from`. The
/// ledger refuses records older than `IDEMPOTENCY_WINDOW_SECS`, so one
/// applied earlier was made at most that long (and a day of clock skew)
/// before this one.
pub fn usage_older_than_wanted(filter: &UsageFilter, record: &UsageRecord) -> bool {
    filter.from > 0 && record.created_at < filter.from - IDEMPOTENCY_WINDOW_SECS - 24 * 60 * 60
}

/// Sets channel `id`'s status to `to` if it is `from` at the moment of the
/// write (`Store::modify`), so that an operator's concurrent choice is never
/// overwritten; whether it did. A missing channel is not an error (false).
pub async fn switch_channel_status(store: &dyn Store, id: &str, from: &'static str, to: &'static str) -> Result<bool> {
    let patch: Patch = Box::new(move |resource| {
        if let Resource::Channel(channel) = resource
            && channel.status == from
        {
            channel.status = to.to_owned();
        }
        Ok(())
    });
    match store.modify(Kind::Channel, id, patch).await {
        Ok(modified) => Ok(modified.revision.is_some()),
        Err(StoreError::NotFound { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Sets the status of key `key_id` of channel `channel_id` to `to` if it
/// is `from`, noting `reason` and `now`, in one atomic write; whether it
/// did. A missing channel or key is not an error (false).
pub async fn switch_key_status(
    store: &dyn Store,
    channel_id: &str,
    key_id: &str,
    (from, to): (&'static str, &'static str),
    reason: String,
    now: i64,
) -> Result<bool> {
    let key_id = key_id.to_owned();
    let patch: Patch = Box::new(move |resource| {
        if let Resource::Channel(channel) = resource
            && channel.pool().iter().any(|k| k.id == key_id && k.status == from)
        {
            channel.fold_legacy_key(now);
            if let Some(key) = channel.keys.iter_mut().find(|k| k.id == key_id) {
                key.status = to.to_owned();
                key.disabled_reason.clone_from(&reason);
                key.disabled_at = now;
            }
        }
        Ok(())
    });
    match store.modify(Kind::Channel, channel_id, patch).await {
        Ok(modified) => Ok(modified.revision.is_some()),
        Err(StoreError::NotFound { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Opens the store named by `url`: `redis://…` (or `rediss://…`) for Redis,
/// `redis+cluster://host:port,…` (or `rediss+cluster://…`) for a cluster,
/// anything else (or empty) is the embedded store in `data_dir`; either
/// keeps usage as `retention` says and upstream keys as `sealing` does. A
/// `rediss://` server's certificate is checked against `ca_file` when given,
/// else against the system's roots.
pub async fn open(
    url: &str,
    data_dir: &std::path::Path,
    ca_file: Option<&std::path::Path>,
    retention: Retention,
    sealing: Sealing,
) -> anyhow::Result<Arc<dyn Store>> {
    use anyhow::Context as _;
    if redis::is_redis_url(url) {
        let ca = match ca_file {
            Some(path) => Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?),
            None => None,
        };
        let store = RedisStore::connect_with_ca(url, ca)
            .await
            .context("connecting to redis")?
            .with_retention(retention)
            .with_sealing(sealing);
        Ok(Arc::new(store))
    } else {
        let path = if url.is_empty() || url == "embedded" {
            data_dir.join("store.redb")
        } else {
            std::path::PathBuf::from(url.strip_prefix("file://").unwrap_or(url))
        };
        let store = EmbeddedStore::open(&path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Arc::new(store.with_retention(retention).with_sealing(sealing)))
    }
}
