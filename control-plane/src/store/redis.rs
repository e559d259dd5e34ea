//! The Redis store, for production and for several control-plane replicas,
//! on one Redis server or on a Redis Cluster (see `conn`).
//!
//! Layout (every key and its slot: `layout`): one hash per kind, id → JSON
//! of the resource with its counters zeroed; the counters in their own
//! hashes (`{gw}:balance`, `{gw}:account_used`, `{gw}:token_used`) so that a
//! `modify` never clobbers a concurrent charge; `{gw}:rev`, the revision;
//! `{gw}:changes`, a stream with entry ids `<rev>-<n>` and fields `kind`,
//! `id`; `{gw}:usage`, a list of JSON records, newest first; usage rollups
//! (see `rollup`); idempotency markers and spending leases (see `ledger`);
//! rate-limit permits granted in one window; `{gw}:names:<kind>`, name → id
//! of the kinds whose names are unique and key hash → id for tokens, kept
//! by the same scripts that write
//! the resources (and built once from the resources by `index_names` for
//! stores written before it). Every write is one Lua script (write, INCR,
//! XADD) on keys of one slot, so a write and its change entry are atomic.
//! `modify` is an optimistic compare-and-set: the script writes only if the
//! resource's JSON is still the one the patch was applied to, and the
//! caller retries if not.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::streams::{StreamId, StreamRangeReply};
use redis::{AsyncCommands, ErrorKind, RedisError, Script, Value};
use tokio::sync::watch;

use super::check_same_id;
use super::codec::{parse_resource, resource_json};
use super::rollup::Retention;
use super::{
    Imported, Modified, PageCursor, Patch, Result, Sealing, SnapshotPage, Store, StoreError, USAGE_SCAN,
    names_are_unique, token_key, unique_name, usage_matches, usage_older_than_wanted,
};
use crate::domain::{Change, Kind, Resource, Snapshot, Token, UsageFilter, UsageOutcome, UsagePage, UsageRecord};

mod access;
mod batch;
mod conn;
mod console;
mod fleet;
mod follow;
mod layout;
mod ledger;
mod lineage;
mod rollup;
mod scripts;
mod slots;
mod usage_batch;
mod usage_json;
mod video;

use self::conn::{Conn, Dialer};
pub use self::conn::{check_url, is_redis_url};
use self::follow::{AbortOnDrop, entry_revision, follow, raise};
use self::layout::{ACCOUNT_USED, BALANCE, CHANGES, REV, TOKEN_USED, USAGE, kind_key, names_key};
use self::scripts::{
    ADJUST, ADJUST_RETURN, BUMP, CHANGES_SINCE, CREATE, DELETE, IMPORT, INDEX_NAMES, MODIFY, NAME_TAKEN, TAKE_PERMITS,
};

/// Changes kept in `{gw}:changes` (approximate trimming keeps at least this).
const FEED_RETAIN: u64 = 100_000;
/// Usage records fetched per `LRANGE` while filtering.
const USAGE_PAGE: usize = 1_000;
/// Compare-and-set attempts of one `modify` before it gives up; each lost
/// attempt means another write of the same resource succeeded.
const MODIFY_ATTEMPTS: u32 = 64;
/// The longest pause between two attempts of one `modify`.
const MODIFY_BACKOFF_MAX: Duration = Duration::from_millis(20);

/// The store on a Redis server or cluster shared by every control-plane
/// replica. Spawns one task that follows `{gw}:changes` for `subscribe`; it
/// ends when the store is dropped.
pub struct RedisStore {
    conn: Conn,
    scripts: Scripts,
    revision: Arc<watch::Sender<u64>>,
    retention: Retention,
    sealing: Sealing,
    /// Records made before this may hold a legacy idempotency marker key.
    legacy_markers_before: i64,
    _follower: AbortOnDrop,
}

/// The Lua scripts; sent with EVALSHA, loaded on the first NOSCRIPT.
struct Scripts {
    create: Script,
    modify: Script,
    delete: Script,
    adjust: Script,
    changes_since: Script,
    take_permits: Script,
    index_names: Script,
    import: Script,
}

// === impl RedisStore ===

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://host:port/db`, or a
    /// cluster's `redis+cluster://host:port,host:port`), renames the keys of
    /// a store written before keys had hash tags (see `layout`), and starts
    /// following its change feed. Fails when the URL is invalid or the
    /// server does not answer; later outages surface as `StoreError::Redis`
    /// per call while the connection is re-established in the background.
    pub async fn connect(url: &str) -> Result<Self> {
        RedisStore::connect_with_ca(url, None).await
    }

    /// `connect`, checking a `rediss://` (or `rediss+cluster://`) server's
    /// certificate against the PEM CA bundle `ca` when given (else the
    /// system's roots).
    pub async fn connect_with_ca(url: &str, ca: Option<Vec<u8>>) -> Result<Self> {
        let dialer = Dialer::new(url, ca)?;
        let mut conn = dialer.shared().await?;
        conn.refuse_cluster_node().await?;
        layout::migrate(&conn).await?;
        let legacy_markers_before = layout::legacy_markers_before(&conn).await?;
        let start: u64 = conn.get::<_, Option<u64>>(REV).await.map_err(StoreError::Redis)?.unwrap_or(0);
        let revision = Arc::new(watch::channel(start).0);
        let follower = tokio::spawn(follow(dialer, revision.clone(), start));
        let single = |body: &str, tail: &str| Script::new(&format!("{NAME_TAKEN}{body}{BUMP}{tail}"));
        let scripts = Scripts {
            create: single(CREATE, "return rev"),
            modify: single(MODIFY, "return rev"),
            delete: single(DELETE, "return rev"),
            adjust: single(ADJUST, ADJUST_RETURN),
            changes_since: Script::new(CHANGES_SINCE),
            take_permits: Script::new(TAKE_PERMITS),
            index_names: Script::new(INDEX_NAMES),
            import: Script::new(IMPORT),
        };
        let (retention, sealing) = (Retention::default(), Sealing::default());
        let store = Self {
            conn,
            scripts,
            revision,
            retention,
            sealing,
            legacy_markers_before,
            _follower: AbortOnDrop(follower),
        };
        store.index_names().await?;
        Ok(store)
    }

    /// The store with `retention` instead of the default.
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// The store sealing upstream keys with `sealing`'s ring (by default
    /// they are kept as they come).
    pub fn with_sealing(mut self, sealing: Sealing) -> Self {
        self.sealing = sealing;
        self
    }

    /// Builds the name (or key hash) index of each indexed kind, once per
    /// Redis: stores written before the rule have none.
    async fn index_names(&self) -> Result<()> {
        for kind in Kind::ALL {
            let Some(field) = indexed_field(kind) else { continue };
            let _: i64 = self
                .scripts
                .index_names
                .key(kind_key(kind))
                .key(names_key(kind))
                .key(format!("{}:indexed", names_key(kind)))
                .arg(field)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(StoreError::Redis)?;
        }
        Ok(())
    }

    /// `NameTaken` for `name` of `kind` (`TokenKeyTaken` for a token's key
    /// hash), naming its owner when it can.
    async fn name_taken(&self, kind: Kind, name: &str) -> StoreError {
        let owner: Option<String> = self.conn.clone().hget(names_key(kind), name).await.ok().flatten();
        if kind == Kind::Token {
            return StoreError::TokenKeyTaken { owner: owner.unwrap_or_default() };
        }
        StoreError::NameTaken { kind, name: name.to_owned(), owner }
    }

    /// Runs a single-resource script (create, delete) on `kind/id` with
    /// its own argument `own`, and the counter hashes of `kind` paired with
    /// `counters` (none at all when `counters` is empty); `None` when its
    /// precondition failed, -1 when a name was taken, else the revision.
    async fn write_one(
        &self,
        script: &Script,
        kind: Kind,
        id: &str,
        json: &[u8],
        own: &str,
        counters: &[i64],
    ) -> Result<Option<i64>> {
        let mut call = script.prepare_invoke();
        call.key(kind_key(kind)).key(REV).key(CHANGES).key(names_key(kind));
        call.arg(id).arg(json).arg(kind.as_str()).arg(FEED_RETAIN).arg(own);
        for (key, value) in counter_keys(kind).iter().zip(counters) {
            call.key(*key).arg(*value);
        }
        let revision: Option<i64> = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        if let Some(revision) = revision.and_then(|r| u64::try_from(r).ok()) {
            self.published(revision);
        }
        Ok(revision)
    }

    /// The stored JSON of `kind/id` (counters zeroed) and its counters in
    /// `counter_keys` order, read in one MULTI/EXEC; `None` when absent.
    async fn get_stored(&self, kind: Kind, id: &str) -> Result<Option<(String, Vec<i64>)>> {
        let mut pipe = redis::pipe();
        pipe.atomic().hget(kind_key(kind), id);
        for key in counter_keys(kind) {
            pipe.hget(*key, id);
        }
        let values: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        let mut values = values.into_iter();
        let Some(json) = take::<Option<String>>(&mut values)? else {
            return Ok(None);
        };
        let counters = counter_keys(kind)
            .iter()
            .map(|_| Ok(take::<Option<i64>>(&mut values)?.unwrap_or(0)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some((json, counters)))
    }

    /// Tells subscribers about a revision this instance wrote, without
    /// waiting for the follower to read it back.
    fn published(&self, revision: u64) {
        self.revision.send_if_modified(|current| raise(current, revision));
    }

    /// The counters of `kind` for each of `ids`: one list per counter hash,
    /// in the order of `ids`, 0 where unset.
    async fn counters_of(&self, kind: Kind, ids: impl Iterator<Item = &str> + Clone) -> Result<Vec<Vec<i64>>> {
        let keys = counter_keys(kind);
        if keys.is_empty() || ids.clone().next().is_none() {
            return Ok(vec![Vec::new(); keys.len()]);
        }
        let mut pipe = redis::pipe();
        for key in keys {
            let mut hmget = redis::cmd("HMGET");
            hmget.arg(*key);
            for id in ids.clone() {
                hmget.arg(id);
            }
            pipe.add_command(hmget);
        }
        let values: Vec<Vec<Option<i64>>> =
            pipe.query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(values.into_iter().map(|v| v.into_iter().map(Option::unwrap_or_default).collect()).collect())
    }

    /// The resources of `kinds` with their counters, and the revision they
    /// are at, read in one MULTI/EXEC.
    async fn read_kinds(&self, kinds: &[Kind]) -> Result<(u64, Vec<Resource>)> {
        let mut pipe = redis::pipe();
        pipe.atomic().get(REV);
        for kind in kinds {
            pipe.hgetall(kind_key(*kind));
            for key in counter_keys(*kind) {
                pipe.hgetall(*key);
            }
        }
        let values: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        let mut values = values.into_iter();
        let revision: Option<u64> = take(&mut values)?;
        let mut resources = Vec::new();
        for kind in kinds {
            let stored: HashMap<String, String> = take(&mut values)?;
            let counters = counter_keys(*kind)
                .iter()
                .map(|_| take::<HashMap<String, i64>>(&mut values))
                .collect::<Result<Vec<_>>>()?;
            let mut of_kind = stored
                .into_iter()
                .map(|(id, json)| {
                    let mut resource = parse_resource(*kind, json.as_bytes())?;
                    let values: Vec<i64> = counters.iter().map(|c| c.get(&id).copied().unwrap_or(0)).collect();
                    set_counters(&mut resource, &values);
                    Ok(resource)
                })
                .collect::<Result<Vec<_>>>()?;
            of_kind.sort_by(|a, b| a.id().cmp(b.id()));
            resources.extend(of_kind);
        }
        Ok((revision.unwrap_or(0), resources))
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn revision(&self) -> Result<u64> {
        let revision: Option<u64> = self.conn.clone().get(REV).await.map_err(StoreError::Redis)?;
        Ok(revision.unwrap_or(0))
    }

    async fn create(&self, mut resource: Resource) -> Result<u64> {
        let (kind, id) = (resource.kind(), resource.id().to_owned());
        self.sealing.seal(&mut resource);
        let counters = counter_values(&resource);
        let name = indexed(&resource).unwrap_or_default().to_owned();
        let json = stored_json(resource)?;
        match self.write_one(&self.scripts.create, kind, &id, &json, &name, &counters).await? {
            None => Err(StoreError::AlreadyExists { kind, id }),
            Some(-1) => Err(self.name_taken(kind, &name).await),
            Some(revision) => Ok(revision.unsigned_abs()),
        }
    }

    async fn import_tokens(&self, tokens: Vec<Token>) -> Result<Imported> {
        if tokens.is_empty() {
            return Ok(Imported::default());
        }
        let mut call = self.scripts.import.prepare_invoke();
        call.key(kind_key(Kind::Token)).key(REV).key(CHANGES).key(names_key(Kind::Token));
        call.arg(FEED_RETAIN);
        let ids: Vec<String> = tokens.iter().map(|t| t.id.clone()).collect();
        for token in tokens {
            call.arg(&token.id).arg(&token.key_hash);
            call.arg(stored_json(Resource::Token(token))?);
        }
        let (revision, codes): (u64, Vec<String>) =
            call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        if codes.len() != ids.len() {
            return Err(malformed("import answered for another number of rows"));
        }
        let rows = codes
            .into_iter()
            .zip(ids)
            .map(|(code, id)| match code.as_str() {
                "" => None,
                "id" => Some(StoreError::AlreadyExists { kind: Kind::Token, id }),
                "repeat" => Some(StoreError::TokenKeyRepeated),
                _ => Some(StoreError::TokenKeyTaken { owner: code }),
            })
            .collect();
        let revision = (revision > 0).then_some(revision);
        if let Some(revision) = revision {
            self.published(revision);
        }
        Ok(Imported { revision, rows })
    }

    async fn modify(&self, kind: Kind, id: &str, mut patch: Patch) -> Result<Modified> {
        for attempt in 0..MODIFY_ATTEMPTS {
            let Some((stored, counters)) = self.get_stored(kind, id).await? else {
                return Err(StoreError::NotFound { kind, id: id.to_owned() });
            };
            let before = parse_resource(kind, stored.as_bytes())?;
            let old_name = indexed(&before).unwrap_or_default().to_owned();
            let mut resource = before.clone();
            self.sealing.open(&mut resource)?;
            set_counters(&mut resource, &counters);
            patch(&mut resource)?;
            check_same_id(&resource, kind, id)?;
            // The counters the patch saw may be stale by now, and the script
            // leaves the counter hashes alone: report what was read.
            set_counters(&mut resource, &counters);
            let mut sealed = resource.clone();
            self.sealing.seal_over(&mut sealed, &before);
            let json = stored_json(sealed)?;
            if json == stored.as_bytes() {
                return Ok(Modified { revision: None, resource });
            }
            let new_name = indexed(&resource).unwrap_or_default().to_owned();
            let mut call = self.scripts.modify.prepare_invoke();
            call.key(kind_key(kind)).key(REV).key(CHANGES).key(names_key(kind));
            call.arg(id).arg(json).arg(kind.as_str()).arg(FEED_RETAIN).arg(stored.as_bytes());
            call.arg(&old_name).arg(&new_name);
            let written: Option<i64> = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
            match written {
                None => return Err(StoreError::NotFound { kind, id: id.to_owned() }),
                Some(0) => tokio::time::sleep(modify_backoff(attempt)).await,
                Some(-1) => return Err(self.name_taken(kind, &new_name).await),
                Some(revision) => {
                    let revision = revision.unsigned_abs();
                    self.published(revision);
                    return Ok(Modified { revision: Some(revision), resource });
                }
            }
        }
        tracing::warn!(%kind, %id, attempts = MODIFY_ATTEMPTS, "gave up modifying a resource that kept changing");
        Err(StoreError::Contended { kind, id: id.to_owned() })
    }

    async fn delete(&self, kind: Kind, id: &str) -> Result<u64> {
        let zeros = vec![0; counter_keys(kind).len()];
        let field = indexed_field(kind).unwrap_or_default();
        let revision = self.write_one(&self.scripts.delete, kind, id, b"", field, &zeros).await?;
        revision.map(i64::unsigned_abs).ok_or_else(|| StoreError::NotFound { kind, id: id.to_owned() })
    }

    async fn get(&self, kind: Kind, id: &str) -> Result<Option<Resource>> {
        let Some((json, counters)) = self.get_stored(kind, id).await? else {
            return Ok(None);
        };
        let mut resource = parse_resource(kind, json.as_bytes())?;
        set_counters(&mut resource, &counters);
        self.sealing.open(&mut resource)?;
        Ok(Some(resource))
    }

    async fn list(&self, kind: Kind) -> Result<Vec<Resource>> {
        let mut resources = self.list_stored(kind).await?;
        self.sealing.open_all(&mut resources)?;
        Ok(resources)
    }

    async fn list_stored(&self, kind: Kind) -> Result<Vec<Resource>> {
        Ok(self.read_kinds(&[kind]).await?.1)
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let (revision, mut resources) = self.read_kinds(&Kind::ALL).await?;
        self.sealing.open_all(&mut resources)?;
        Ok(Snapshot { revision, resources })
    }

    async fn snapshot_page(&self, cursor: &PageCursor, size: usize) -> Result<SnapshotPage> {
        let Some(kind) = Kind::ALL.get(cursor.kind).copied() else {
            return Ok(SnapshotPage::default());
        };
        let position = if cursor.position.is_empty() { "0" } else { cursor.position.as_str() };
        let mut conn = self.conn.clone();
        let (next, pairs): (String, Vec<(String, String)>) = redis::cmd("HSCAN")
            .arg(kind_key(kind))
            .arg(position)
            .arg("COUNT")
            .arg(size.max(1))
            .query_async(&mut conn)
            .await
            .map_err(StoreError::Redis)?;
        let counters = self.counters_of(kind, pairs.iter().map(|(id, _)| id.as_str())).await?;
        let mut resources = Vec::with_capacity(pairs.len());
        for (i, (_, json)) in pairs.iter().enumerate() {
            let mut resource = parse_resource(kind, json.as_bytes())?;
            let values: Vec<i64> = counters.iter().map(|c| c.get(i).copied().unwrap_or(0)).collect();
            set_counters(&mut resource, &values);
            self.sealing.open(&mut resource)?;
            resources.push(resource);
        }
        let next = if next != "0" {
            Some(PageCursor { kind: cursor.kind, position: next })
        } else if cursor.kind + 1 < Kind::ALL.len() {
            Some(PageCursor { kind: cursor.kind + 1, position: String::new() })
        } else {
            None
        };
        Ok(SnapshotPage { resources, next })
    }

    async fn count(&self) -> Result<u64> {
        let mut pipe = redis::pipe();
        for kind in Kind::ALL {
            pipe.hlen(kind_key(kind));
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(counts.iter().sum())
    }

    async fn get_many(&self, refs: &[(Kind, String)]) -> Result<Vec<Option<Resource>>> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (kind, id) in refs {
            pipe.hget(kind_key(*kind), id);
            for key in counter_keys(*kind) {
                pipe.hget(*key, id);
            }
        }
        let values: Vec<Value> = pipe.query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        let mut values = values.into_iter();
        let mut found = Vec::with_capacity(refs.len());
        for (kind, _) in refs {
            let json = take::<Option<String>>(&mut values)?;
            let counters = counter_keys(*kind)
                .iter()
                .map(|_| Ok(take::<Option<i64>>(&mut values)?.unwrap_or(0)))
                .collect::<Result<Vec<_>>>()?;
            found.push(match json {
                Some(json) => {
                    let mut resource = parse_resource(*kind, json.as_bytes())?;
                    set_counters(&mut resource, &counters);
                    self.sealing.open(&mut resource)?;
                    Some(resource)
                }
                None => None,
            });
        }
        Ok(found)
    }

    async fn changes_since(&self, since: u64) -> Result<Option<Vec<Change>>> {
        let reply: Vec<Value> = self
            .scripts
            .changes_since
            .key(REV)
            .key(CHANGES)
            .arg(since)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut reply = reply.into_iter();
        if take::<i64>(&mut reply)? == 0 {
            return Ok(None);
        }
        let entries: StreamRangeReply = take(&mut reply)?;
        entries.ids.iter().map(change).collect::<Result<Vec<_>>>().map(Some)
    }

    async fn adjust_balance(&self, account_id: &str, delta_micros: i64) -> Result<Resource> {
        let reply: Option<(u64, String, i64, i64)> = self
            .scripts
            .adjust
            .key(kind_key(Kind::Account))
            .key(REV)
            .key(CHANGES)
            .key(BALANCE)
            .key(ACCOUNT_USED)
            .arg(account_id)
            .arg(delta_micros)
            .arg(Kind::Account.as_str())
            .arg(FEED_RETAIN)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let Some((revision, json, balance, used)) = reply else {
            return Err(StoreError::NotFound { kind: Kind::Account, id: account_id.to_owned() });
        };
        self.published(revision);
        let mut account = parse_resource(Kind::Account, json.as_bytes())?;
        set_counters(&mut account, &[balance, used]);
        Ok(account)
    }

    async fn apply_usage(&self, records: &[UsageRecord]) -> Result<UsageOutcome> {
        self.apply_usage_records(records).await
    }

    async fn list_usage_page(&self, filter: &UsageFilter) -> Result<UsagePage> {
        let limit = if filter.limit == 0 { 100 } else { filter.limit };
        let mut conn = self.conn.clone();
        // A cursor is `<index>:<request id>` of the last record read. New
        // records are pushed at the head and only the tail is trimmed, so that
        // record is at `index` or further down by now: look for it there.
        let mut start = match filter.cursor.as_str() {
            "" => 0,
            cursor => self.after_cursor(cursor).await?,
        };
        let mut page = UsagePage::default();
        // New records push older ones further down while we page; a record
        // seen twice is skipped by its request id.
        let mut seen = HashSet::new();
        let mut scanned = 0;
        loop {
            let jsons = usage_range(&mut conn, start, USAGE_PAGE).await?;
            if jsons.is_empty() {
                return Ok(page);
            }
            for (offset, json) in jsons.iter().enumerate() {
                let record = decode::<UsageRecord>(json)?;
                if usage_older_than_wanted(filter, &record) {
                    page.next.clear();
                    return Ok(page);
                }
                if !seen.insert(record.request_id.clone()) {
                    continue;
                }
                scanned += 1;
                if usage_matches(filter, &record) {
                    page.items.push(record.clone());
                }
                if page.items.len() == limit || scanned == USAGE_SCAN {
                    let index = start + offset;
                    let more: i64 = conn.llen(USAGE).await.map_err(StoreError::Redis)?;
                    if usize::try_from(more).unwrap_or(0) > index + 1 {
                        page.next = format!("{index}:{}", record.request_id);
                    }
                    return Ok(page);
                }
            }
            start += jsons.len();
        }
    }

    async fn take_permits(&self, key: &str, window_start: i64, window_secs: i64, limit: u32, want: u32) -> Result<u32> {
        if want == 0 || limit == 0 {
            return Ok(0);
        }
        // Kept for two windows: the count outlives its window, so a late
        // caller of that window still sees it.
        let ttl = window_secs.max(1).saturating_mul(2);
        self.scripts
            .take_permits
            .key(layout::permits_key(key, window_start))
            .arg(limit)
            .arg(want)
            .arg(ttl)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }
}

impl RedisStore {
    /// The index just after the record a usage cursor names; `BadCursor`
    /// when the cursor is malformed or its record left the log.
    async fn after_cursor(&self, cursor: &str) -> Result<usize> {
        let bad = || StoreError::BadCursor { cursor: cursor.to_owned() };
        let (index, request_id) = cursor.split_once(':').ok_or_else(bad)?;
        let mut start: usize = index.parse().map_err(|_| bad())?;
        let mut conn = self.conn.clone();
        loop {
            let jsons = usage_range(&mut conn, start, USAGE_PAGE).await?;
            if jsons.is_empty() {
                return Err(bad());
            }
            for (offset, json) in jsons.iter().enumerate() {
                if decode::<UsageRecord>(json)?.request_id == request_id {
                    return Ok(start + offset + 1);
                }
            }
            start += jsons.len();
        }
    }
}

/// Up to `count` JSON records of `{gw}:usage` from index `start`.
async fn usage_range(conn: &mut Conn, start: usize, count: usize) -> Result<Vec<String>> {
    let first = isize::try_from(start).unwrap_or(isize::MAX);
    let last = isize::try_from(start + count - 1).unwrap_or(isize::MAX);
    conn.lrange(USAGE, first, last).await.map_err(StoreError::Redis)
}

/// How long `modify` waits after losing attempt `attempt` (from 0): random,
/// so that writers that collided spread out, and growing up to
/// `MODIFY_BACKOFF_MAX`.
fn modify_backoff(attempt: u32) -> Duration {
    use rand::RngExt as _;
    let ceiling = Duration::from_micros(250u64 << attempt.min(8)).min(MODIFY_BACKOFF_MAX);
    let micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::rng().random_range(0..=micros))
}

/// The value `kind`'s index maps to ids: the unique name, or a token's key
/// hash.
fn indexed(resource: &Resource) -> Option<&str> {
    unique_name(resource).or_else(|| token_key(resource))
}

/// The JSON field `names_key` indexes, for kinds with an index.
fn indexed_field(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Token => Some("key_hash"),
        kind if names_are_unique(kind) => Some("name"),
        _ => None,
    }
}

/// The hashes holding a kind's counters, in the order of `counter_values`.
fn counter_keys(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Account => &[BALANCE, ACCOUNT_USED],
        Kind::Token => &[TOKEN_USED],
        Kind::Group | Kind::Channel | Kind::Model => &[],
    }
}

fn counter_values(resource: &Resource) -> Vec<i64> {
    match resource {
        Resource::Account(a) => vec![a.balance_micros, a.used_micros],
        Resource::Token(t) => vec![t.used_micros],
        Resource::Group(_) | Resource::Channel(_) | Resource::Model(_) => vec![],
    }
}

/// Sets a resource's counters from `values`, in `counter_keys` order.
fn set_counters(resource: &mut Resource, values: &[i64]) {
    match (resource, values) {
        (Resource::Account(a), [balance, used]) => {
            a.balance_micros = *balance;
            a.used_micros = *used;
        }
        (Resource::Token(t), [used]) => t.used_micros = *used,
        _ => {}
    }
}

/// JSON of `resource` as its kind hash keeps it: counters zeroed, since they
/// live in their own hashes.
fn stored_json(mut resource: Resource) -> Result<Vec<u8>> {
    let zeros = vec![0; counter_keys(resource.kind()).len()];
    set_counters(&mut resource, &zeros);
    resource_json(&resource)
}

fn decode<T: serde::de::DeserializeOwned>(json: &str) -> Result<T> {
    super::codec::decode(json.as_bytes())
}

/// The next value of a pipeline or script reply, converted.
fn take<T: redis::FromRedisValue>(values: &mut impl Iterator<Item = Value>) -> Result<T> {
    let value = values.next().ok_or_else(|| malformed("reply shorter than expected"))?;
    redis::from_redis_value(value).map_err(|error| StoreError::Redis(error.into()))
}

fn change(entry: &StreamId) -> Result<Change> {
    let revision = entry_revision(&entry.id).ok_or_else(|| malformed("change feed entry id is not <rev>-<n>"))?;
    let kind = entry.get::<String>("kind").and_then(|k| Kind::parse(&k));
    let kind = kind.ok_or_else(|| malformed("change feed entry has no valid kind"))?;
    let id = entry.get::<String>("id").ok_or_else(|| malformed("change feed entry has no id"))?;
    Ok(Change { revision, kind, id })
}

fn malformed(what: &'static str) -> StoreError {
    StoreError::Redis(RedisError::from((ErrorKind::UnexpectedReturnType, what)))
}
