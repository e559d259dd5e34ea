//! The embedded store: one redb file, for a single control-plane node that
//! runs without Redis. Every write is one redb write transaction that changes
//! the resource, bumps the revision and appends to the change feed together,
//! so a crash never leaves a write without its change entry or the reverse.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadTransaction, ReadableTable, ReadableTableMetadata as _, TableDefinition, WriteTransaction};
use tokio::sync::watch;

use self::names::{check_name_free, claim_token_key, index_token_keys, release_token_key};
use super::codec::{decode, encode, parse_resource, resource_json};
use super::rollup::Retention;
use super::{
    Imported, Modified, PageCursor, Patch, Result, Sealing, SnapshotPage, Store, StoreError, USAGE_SCAN, check_same_id,
    token_key, unique_name, usage_matches, usage_older_than_wanted,
};
use crate::domain::{
    Change, Kind, Resource, Snapshot, Token, UsageFilter, UsageOutcome, UsagePage, UsageRecord, now_unix,
};

mod access;
mod batch;
mod console;
mod fleet;
mod ledger;
mod lineage;
mod names;
mod rollup;
mod slots;
mod video;

/// Resource-wide bookkeeping: the revision, the feed's length and floor, the
/// last usage sequence number.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The change feed: revision → JSON list of `(kind, id)` changed at it.
const CHANGES: TableDefinition<u64, &[u8]> = TableDefinition::new("changes");
/// The usage log: sequence number (application order) → JSON record.
const USAGE: TableDefinition<u64, &[u8]> = TableDefinition::new("usage");
/// Request ids already applied → Unix second at which they are forgotten.
const APPLIED: TableDefinition<&str, u64> = TableDefinition::new("applied");
/// `(forget_at, request_id)`, so expired ids are pruned oldest first.
const APPLIED_EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("applied_expiry");
/// Rate-limit permits: `(key, window_start)` → permits granted in that window.
const PERMITS: TableDefinition<(&str, i64), u64> = TableDefinition::new("permits");
/// `(forget_at, key, window_start)`, so stale windows are pruned oldest first.
const PERMITS_EXPIRY: TableDefinition<(i64, &str, i64), ()> = TableDefinition::new("permits_expiry");

const REVISION: &str = "revision";
/// Number of `(kind, id)` entries in `CHANGES`.
const FEED_LEN: &str = "feed_len";
/// The feed holds every change after this revision.
const FEED_FLOOR: &str = "feed_floor";
const USAGE_SEQ: &str = "usage_seq";
/// 1 once `TOKEN_KEYS` was built from the stored tokens.
const TOKEN_KEYS_BUILT: &str = "token_keys_built";

/// Changes kept in the feed; older ones are trimmed a revision at a time.
const FEED_RETAIN: u64 = 100_000;
/// Expired request ids forgotten per usage transaction, to bound its cost.
const APPLIED_PRUNE_BATCH: usize = 1_000;
/// Stale permit windows forgotten per `take_permits`, to bound its cost.
const PERMITS_PRUNE_BATCH: usize = 100;

/// The store in one local redb file. Writes run on the blocking pool (each
/// commit fsyncs); `subscribe` follows the commits of this process, the only
/// writer the file can have.
pub struct EmbeddedStore {
    db: Arc<Database>,
    revision: Arc<watch::Sender<u64>>,
    retention: Retention,
    sealing: Sealing,
}

// === impl EmbeddedStore ===

impl EmbeddedStore {
    /// Opens the database at `path`, creating it (and its parent directory)
    /// when missing. Fails when the file is not a redb database or another
    /// process holds it open.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Embedded(Box::new(e)))?;
        }
        let db = Database::create(path).map_err(db_err)?;
        // The store holds upstream keys and key hashes: the owner's alone.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let private = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(path, private).map_err(|e| StoreError::Embedded(Box::new(e)))?;
        }
        // Create every table once so that read transactions can always open them.
        let txn = db.begin_write().map_err(db_err)?;
        for kind in Kind::ALL {
            txn.open_table(resources(kind)).map_err(db_err)?;
        }
        txn.open_table(META).map_err(db_err)?;
        txn.open_table(CHANGES).map_err(db_err)?;
        txn.open_table(USAGE).map_err(db_err)?;
        txn.open_table(APPLIED).map_err(db_err)?;
        txn.open_table(APPLIED_EXPIRY).map_err(db_err)?;
        txn.open_table(rollup::ROLLUPS).map_err(db_err)?;
        txn.open_table(ledger::WINDOWS).map_err(db_err)?;
        txn.open_table(ledger::WINDOWS_EXPIRY).map_err(db_err)?;
        index_token_keys(&txn)?;
        txn.commit().map_err(db_err)?;

        let revision = {
            let txn = db.begin_read().map_err(db_err)?;
            let meta = txn.open_table(META).map_err(db_err)?;
            meta_get(&meta, REVISION)?
        };
        Ok(Self {
            db: Arc::new(db),
            revision: Arc::new(watch::channel(revision).0),
            retention: Retention::default(),
            sealing: Sealing::default(),
        })
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

    /// Runs `f` in one write transaction on the blocking pool. When `f` names
    /// changed resources, the revision is bumped and the change recorded in
    /// the same transaction. Returns `f`'s value and the revision after it.
    async fn write<T, F>(&self, f: F) -> Result<(T, u64)>
    where
        T: Send + 'static,
        F: FnOnce(&WriteTransaction) -> Result<(T, Vec<(Kind, String)>)> + Send + 'static,
    {
        let (db, published) = (self.db.clone(), self.revision.clone());
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(db_err)?;
            let (value, changed) = match f(&txn) {
                Ok(done) => done,
                Err(error) => {
                    txn.abort().map_err(db_err)?;
                    return Err(error);
                }
            };
            let revision = record_changes(&txn, &changed, FEED_RETAIN)?;
            txn.commit().map_err(db_err)?;
            // Published here, not after the await, so that a caller that
            // gives up on the future cannot hide a committed revision.
            // Writers commit one at a time but may get here out of order.
            published.send_if_modified(|current| {
                let newer = revision > *current;
                if newer {
                    *current = revision;
                }
                newer
            });
            Ok((value, revision))
        })
        .await
        .map_err(|e| StoreError::Embedded(Box::new(e)))?
    }

    /// Runs `f` in one read transaction on the blocking pool, for reads that
    /// may scan a whole table.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T> + Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(db_err)?;
            f(&txn)
        })
        .await
        .map_err(|e| StoreError::Embedded(Box::new(e)))?
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn revision(&self) -> Result<u64> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        meta_get(&meta, REVISION)
    }

    async fn create(&self, mut resource: Resource) -> Result<u64> {
        let (kind, id) = (resource.kind(), resource.id().to_owned());
        self.sealing.seal(&mut resource);
        let json = resource_json(&resource)?;
        let ((), revision) = self
            .write(move |txn| {
                let mut table = txn.open_table(resources(kind)).map_err(db_err)?;
                if table.get(id.as_str()).map_err(db_err)?.is_some() {
                    return Err(StoreError::AlreadyExists { kind, id });
                }
                if let Some(name) = unique_name(&resource) {
                    check_name_free(&table, kind, name, &id)?;
                }
                if let Some(hash) = token_key(&resource) {
                    claim_token_key(txn, &table, hash, &id)?;
                }
                table.insert(id.as_str(), json.as_slice()).map_err(db_err)?;
                drop(table);
                Ok(((), vec![(kind, id)]))
            })
            .await?;
        Ok(revision)
    }

    async fn import_tokens(&self, tokens: Vec<Token>) -> Result<Imported> {
        let (rows, revision) = self
            .write(move |txn| {
                let mut table = txn.open_table(resources(Kind::Token)).map_err(db_err)?;
                let mut rows = Vec::with_capacity(tokens.len());
                let mut written = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for token in tokens {
                    let id = token.id.clone();
                    let resource = Resource::Token(token);
                    let refused = if table.get(id.as_str()).map_err(db_err)?.is_some() {
                        Some(StoreError::AlreadyExists { kind: Kind::Token, id: id.clone() })
                    } else if token_key(&resource).is_some_and(|hash| seen.contains(hash)) {
                        Some(StoreError::TokenKeyRepeated)
                    } else if let Some(hash) = token_key(&resource) {
                        claim_token_key(txn, &table, hash, &id).err()
                    } else {
                        None
                    };
                    if refused.is_none() {
                        table.insert(id.as_str(), resource_json(&resource)?.as_slice()).map_err(db_err)?;
                        if let Some(hash) = token_key(&resource) {
                            seen.insert(hash.to_owned());
                        }
                        written.push((Kind::Token, id));
                    }
                    rows.push(refused);
                }
                drop(table);
                Ok(((rows, !written.is_empty()), written))
            })
            .await?;
        let (rows, any) = rows;
        Ok(Imported { revision: any.then_some(revision), rows })
    }

    async fn modify(&self, kind: Kind, id: &str, mut patch: Patch) -> Result<Modified> {
        let id = id.to_owned();
        let sealing = self.sealing.clone();
        // Read, patch and write in one write transaction: redb runs write
        // transactions one at a time, so nothing can come in between.
        let ((resource, changed), revision) = self
            .write(move |txn| {
                let mut table = txn.open_table(resources(kind)).map_err(db_err)?;
                let stored = match table.get(id.as_str()).map_err(db_err)? {
                    Some(json) => parse_resource(kind, json.value())?,
                    None => return Err(StoreError::NotFound { kind, id }),
                };
                let mut next = stored.clone();
                sealing.open(&mut next)?;
                patch(&mut next)?;
                check_same_id(&next, kind, &id)?;
                keep_counters(&mut next, &stored);
                let plain = next.clone();
                sealing.seal_over(&mut next, &stored);
                if next == stored {
                    return Ok(((plain, false), Vec::new()));
                }
                if let Some(name) = unique_name(&next).filter(|name| unique_name(&stored) != Some(name)) {
                    check_name_free(&table, kind, name, &id)?;
                }
                if token_key(&next) != token_key(&stored) {
                    if let Some(hash) = token_key(&next) {
                        claim_token_key(txn, &table, hash, &id)?;
                    }
                    if let Some(hash) = token_key(&stored) {
                        release_token_key(txn, hash, &id)?;
                    }
                }
                table.insert(id.as_str(), resource_json(&next)?.as_slice()).map_err(db_err)?;
                drop(table);
                Ok(((plain, true), vec![(kind, id)]))
            })
            .await?;
        Ok(Modified { revision: changed.then_some(revision), resource })
    }

    async fn delete(&self, kind: Kind, id: &str) -> Result<u64> {
        let id = id.to_owned();
        let ((), revision) = self
            .write(move |txn| {
                let mut table = txn.open_table(resources(kind)).map_err(db_err)?;
                let Some(json) = table.remove(id.as_str()).map_err(db_err)? else {
                    return Err(StoreError::NotFound { kind, id });
                };
                let removed = parse_resource(kind, json.value())?;
                drop(json);
                drop(table);
                if let Some(hash) = token_key(&removed) {
                    release_token_key(txn, hash, &id)?;
                }
                Ok(((), vec![(kind, id)]))
            })
            .await?;
        Ok(revision)
    }

    async fn get(&self, kind: Kind, id: &str) -> Result<Option<Resource>> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(resources(kind)).map_err(db_err)?;
        let json = table.get(id).map_err(db_err)?;
        let mut resource = json.map(|json| parse_resource(kind, json.value())).transpose()?;
        if let Some(resource) = resource.as_mut() {
            self.sealing.open(resource)?;
        }
        Ok(resource)
    }

    async fn list(&self, kind: Kind) -> Result<Vec<Resource>> {
        let mut resources = self.list_stored(kind).await?;
        self.sealing.open_all(&mut resources)?;
        Ok(resources)
    }

    async fn list_stored(&self, kind: Kind) -> Result<Vec<Resource>> {
        self.read(move |txn| list_kind(txn, kind)).await
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let mut snapshot = self
            .read(|txn| {
                let meta = txn.open_table(META).map_err(db_err)?;
                let mut snapshot = Snapshot { revision: meta_get(&meta, REVISION)?, resources: Vec::new() };
                for kind in Kind::ALL {
                    snapshot.resources.extend(list_kind(txn, kind)?);
                }
                Ok(snapshot)
            })
            .await?;
        self.sealing.open_all(&mut snapshot.resources)?;
        Ok(snapshot)
    }

    async fn count(&self) -> Result<u64> {
        self.read(|txn| {
            let mut count = 0;
            for kind in Kind::ALL {
                count += txn.open_table(resources(kind)).map_err(db_err)?.len().map_err(db_err)?;
            }
            Ok(count)
        })
        .await
    }

    async fn snapshot_page(&self, cursor: &PageCursor, size: usize) -> Result<SnapshotPage> {
        let Some(kind) = Kind::ALL.get(cursor.kind).copied() else {
            return Ok(SnapshotPage::default());
        };
        let (index, after, size) = (cursor.kind, cursor.position.clone(), size.max(1));
        let mut page = self
            .read(move |txn| {
                let table = txn.open_table(resources(kind)).map_err(db_err)?;
                // The position is the last id read; ids are never empty.
                let from = if after.is_empty() { Bound::Unbounded } else { Bound::Excluded(after.as_str()) };
                let mut page = SnapshotPage::default();
                let mut last = None;
                for entry in table.range::<&str>((from, Bound::Unbounded)).map_err(db_err)?.take(size) {
                    let (id, json) = entry.map_err(db_err)?;
                    page.resources.push(parse_resource(kind, json.value())?);
                    last = Some(id.value().to_owned());
                }
                page.next = match last {
                    Some(position) if page.resources.len() == size => Some(PageCursor { kind: index, position }),
                    _ => (index + 1 < Kind::ALL.len()).then(|| PageCursor { kind: index + 1, position: String::new() }),
                };
                Ok(page)
            })
            .await?;
        self.sealing.open_all(&mut page.resources)?;
        Ok(page)
    }

    async fn changes_since(&self, since: u64) -> Result<Option<Vec<Change>>> {
        self.read(move |txn| {
            let meta = txn.open_table(META).map_err(db_err)?;
            if since > meta_get(&meta, REVISION)? || since < meta_get(&meta, FEED_FLOOR)? {
                return Ok(None);
            }
            let feed = txn.open_table(CHANGES).map_err(db_err)?;
            let mut changes = Vec::new();
            for entry in feed.range(since.saturating_add(1)..).map_err(db_err)? {
                let (revision, changed) = entry.map_err(db_err)?;
                let revision = revision.value();
                let changed: Vec<(Kind, String)> = decode(changed.value())?;
                changes.extend(changed.into_iter().map(|(kind, id)| Change { revision, kind, id }));
            }
            Ok(Some(changes))
        })
        .await
    }

    async fn adjust_balance(&self, account_id: &str, delta_micros: i64) -> Result<Resource> {
        let id = account_id.to_owned();
        let (account, _) = self
            .write(move |txn| {
                let mut table = txn.open_table(resources(Kind::Account)).map_err(db_err)?;
                let Some(account) = charge(&mut table, Kind::Account, &id, |r| {
                    if let Resource::Account(a) = r {
                        a.balance_micros = a.balance_micros.saturating_add(delta_micros);
                    }
                })?
                else {
                    return Err(StoreError::NotFound { kind: Kind::Account, id });
                };
                drop(table);
                Ok((account, vec![(Kind::Account, id)]))
            })
            .await?;
        Ok(account)
    }

    async fn apply_usage(&self, records: &[UsageRecord]) -> Result<UsageOutcome> {
        let records = records.to_vec();
        let now = u64::try_from(now_unix()).unwrap_or(0);
        let retention = self.retention;
        let (outcome, _) = self
            .write(move |txn| {
                let mut ledger = ledger::Ledger::open(txn, now, &retention)?;
                let mut outcome = UsageOutcome::default();
                for record in &records {
                    if ledger.apply(record)? {
                        outcome.applied += 1;
                    } else {
                        outcome.duplicates += 1;
                    }
                }
                ledger.close()?;
                Ok((outcome, vec![]))
            })
            .await?;
        Ok(outcome)
    }

    async fn list_usage_page(&self, filter: &UsageFilter) -> Result<UsagePage> {
        let filter = filter.clone();
        let limit = if filter.limit == 0 { 100 } else { filter.limit };
        // The cursor is the sequence number of the last record read.
        let before = match filter.cursor.as_str() {
            "" => u64::MAX,
            cursor => cursor
                .strip_prefix('s')
                .and_then(|seq| seq.parse().ok())
                .ok_or_else(|| StoreError::BadCursor { cursor: cursor.to_owned() })?,
        };
        self.read(move |txn| {
            let log = txn.open_table(USAGE).map_err(db_err)?;
            let mut page = UsagePage::default();
            let mut scanned = 0;
            for entry in log.range::<u64>(..before).map_err(db_err)?.rev() {
                let (seq, json) = entry.map_err(db_err)?;
                let record: UsageRecord = decode(json.value())?;
                if usage_older_than_wanted(&filter, &record) {
                    return Ok(UsagePage { items: page.items, next: String::new() });
                }
                scanned += 1;
                if usage_matches(&filter, &record) {
                    page.items.push(record);
                }
                if page.items.len() == limit || scanned == USAGE_SCAN {
                    // More only if an older record exists at all.
                    let seq = seq.value();
                    if log.range::<u64>(..seq).map_err(db_err)?.next_back().is_some() {
                        page.next = format!("s{seq}");
                    }
                    break;
                }
            }
            Ok(page)
        })
        .await
    }

    async fn take_permits(&self, key: &str, window_start: i64, window_secs: i64, limit: u32, want: u32) -> Result<u32> {
        if want == 0 || limit == 0 {
            return Ok(0);
        }
        let key = key.to_owned();
        // Kept for two windows, as the Redis backend does.
        let forget_at = window_start.saturating_add(window_secs.max(1).saturating_mul(2));
        let now = now_unix();
        let (grant, _) = self
            .write(move |txn| {
                prune_permits(txn, now)?;
                let mut permits = txn.open_table(PERMITS).map_err(db_err)?;
                let granted = permits.get((key.as_str(), window_start)).map_err(db_err)?.map_or(0, |v| v.value());
                let grant = u64::from(want).min(u64::from(limit).saturating_sub(granted));
                if grant > 0 {
                    permits.insert((key.as_str(), window_start), granted + grant).map_err(db_err)?;
                    if granted == 0 {
                        let mut expiry = txn.open_table(PERMITS_EXPIRY).map_err(db_err)?;
                        expiry.insert((forget_at, key.as_str(), window_start), ()).map_err(db_err)?;
                    }
                }
                // No resource changed: the revision stays put.
                Ok((u32::try_from(grant).unwrap_or(0), Vec::new()))
            })
            .await?;
        Ok(grant)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }
}

/// The table holding resources of `kind`: id → JSON of the `Resource`,
/// counters included.
fn resources(kind: Kind) -> TableDefinition<'static, &'static str, &'static [u8]> {
    TableDefinition::new(kind.as_str())
}

/// Bumps the revision and appends `changed` at it, trimming the oldest
/// revisions past `retain` changes; returns the revision, which stays
/// put when nothing changed.
fn record_changes(txn: &WriteTransaction, changed: &[(Kind, String)], retain: u64) -> Result<u64> {
    let mut meta = txn.open_table(META).map_err(db_err)?;
    let revision = meta_get(&meta, REVISION)?;
    if changed.is_empty() {
        return Ok(revision);
    }
    let revision = revision + 1;
    let mut feed = txn.open_table(CHANGES).map_err(db_err)?;
    feed.insert(revision, encode(&changed)?.as_slice()).map_err(db_err)?;
    let mut len = meta_get(&meta, FEED_LEN)? + changed.len() as u64;
    let mut floor = meta_get(&meta, FEED_FLOOR)?;
    while len > retain {
        let first = match feed.first().map_err(db_err)? {
            Some((r, entries)) => (r.value(), decode::<Vec<(Kind, String)>>(entries.value())?.len() as u64),
            None => break,
        };
        // Trim whole revisions, and only while at least `retain` remain.
        let (oldest, count) = first;
        if oldest == revision || len.saturating_sub(count) < retain {
            break;
        }
        feed.remove(oldest).map_err(db_err)?;
        len -= count;
        floor = oldest;
    }
    meta.insert(REVISION, revision).map_err(db_err)?;
    meta.insert(FEED_LEN, len).map_err(db_err)?;
    meta.insert(FEED_FLOOR, floor).map_err(db_err)?;
    Ok(revision)
}

/// Forgets up to `APPLIED_PRUNE_BATCH` request ids whose time ran out.
fn prune_applied(txn: &WriteTransaction, now: u64) -> Result<()> {
    let mut expiry = txn.open_table(APPLIED_EXPIRY).map_err(db_err)?;
    let mut seen = txn.open_table(APPLIED).map_err(db_err)?;
    for _ in 0..APPLIED_PRUNE_BATCH {
        let Some((at, rid)) = expiry.first().map_err(db_err)?.map(|(k, _)| {
            let (at, rid) = k.value();
            (at, rid.to_owned())
        }) else {
            break;
        };
        if at > now {
            break;
        }
        expiry.remove((at, rid.as_str())).map_err(db_err)?;
        // The id may have been applied again since, with a later deadline.
        if seen.get(rid.as_str()).map_err(db_err)?.map(|v| v.value()) == Some(at) {
            seen.remove(rid.as_str()).map_err(db_err)?;
        }
    }
    Ok(())
}

/// Forgets up to `PERMITS_PRUNE_BATCH` permit windows past their keeping time.
fn prune_permits(txn: &WriteTransaction, now: i64) -> Result<()> {
    let mut expiry = txn.open_table(PERMITS_EXPIRY).map_err(db_err)?;
    let mut permits = txn.open_table(PERMITS).map_err(db_err)?;
    for _ in 0..PERMITS_PRUNE_BATCH {
        let Some((at, key, start)) = expiry.first().map_err(db_err)?.map(|(k, _)| {
            let (at, key, start) = k.value();
            (at, key.to_owned(), start)
        }) else {
            break;
        };
        if at > now {
            break;
        }
        expiry.remove((at, key.as_str(), start)).map_err(db_err)?;
        permits.remove((key.as_str(), start)).map_err(db_err)?;
    }
    Ok(())
}

/// Applies `f` to the stored resource `kind/id` of `table` and writes it back;
/// `None` when there is no such resource.
fn charge(
    table: &mut redb::Table<'_, &'static str, &'static [u8]>,
    kind: Kind,
    id: &str,
    f: impl FnOnce(&mut Resource),
) -> Result<Option<Resource>> {
    let Some(mut resource) =
        table.get(id).map_err(db_err)?.map(|json| parse_resource(kind, json.value())).transpose()?
    else {
        return Ok(None);
    };
    f(&mut resource);
    table.insert(id, resource_json(&resource)?.as_slice()).map_err(db_err)?;
    Ok(Some(resource))
}

fn list_kind(txn: &ReadTransaction, kind: Kind) -> Result<Vec<Resource>> {
    let table = txn.open_table(resources(kind)).map_err(db_err)?;
    let mut out = Vec::new();
    // Keys are UTF-8 and compare bytewise, which is `String`'s order too.
    for entry in table.iter().map_err(db_err)? {
        let (_, json) = entry.map_err(db_err)?;
        out.push(parse_resource(kind, json.value())?);
    }
    Ok(out)
}

/// Copies the counters of `stored` into `resource`, which replaces it.
fn keep_counters(resource: &mut Resource, stored: &Resource) {
    match (resource, stored) {
        (Resource::Account(new), Resource::Account(old)) => {
            new.balance_micros = old.balance_micros;
            new.used_micros = old.used_micros;
        }
        (Resource::Token(new), Resource::Token(old)) => new.used_micros = old.used_micros,
        _ => {}
    }
}

fn meta_get(meta: &impl ReadableTable<&'static str, u64>, key: &str) -> Result<u64> {
    Ok(meta.get(key).map_err(db_err)?.map(|v| v.value()).unwrap_or(0))
}

fn db_err(error: impl Into<redb::Error>) -> StoreError {
    StoreError::Embedded(Box::new(error.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded_store_passes_the_conformance_suite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(&dir.path().join("nested/store.redb")).expect("open store");
        conformance::run(Arc::new(store)).await;
    }

    #[cfg(unix)]
    #[test]
    fn the_store_file_is_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.redb");
        let _store = EmbeddedStore::open(&path).expect("open store");
        assert_eq!(std::fs::metadata(&path).expect("metadata").permissions().mode() & 0o777, 0o600);
    }

    #[tokio::test]
    async fn changes_since_is_none_once_the_feed_no_longer_reaches_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(&dir.path().join("store.redb")).expect("open store");
        const RETAIN: u64 = 10;
        let extra = 5;
        // A short feed, written in one transaction.
        let txn = store.db.begin_write().expect("begin");
        for _ in 0..RETAIN + extra {
            record_changes(&txn, &[(Kind::Model, "m".to_owned())], RETAIN).expect("record");
        }
        txn.commit().expect("commit");

        assert_eq!(store.revision().await.expect("revision"), RETAIN + extra);
        assert_eq!(store.changes_since(0).await.expect("changes"), None, "revision 1 was trimmed");
        assert_eq!(store.changes_since(extra - 1).await.expect("changes"), None, "revision {extra} was trimmed");
        let kept = store.changes_since(extra).await.expect("changes").expect("the feed reaches back to {extra}");
        assert_eq!(kept.len() as u64, RETAIN, "the feed keeps `retain` changes");
        assert_eq!(kept.first().map(|c| c.revision), Some(extra + 1));
    }

    #[tokio::test]
    async fn embedded_store_keeps_its_data_across_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.redb");
        let record = conformance::usage("reopen-req-1", "reopen-tok", "reopen-acct", "m", 250);
        let revision = {
            let store = EmbeddedStore::open(&path).expect("open store");
            store.create(conformance::account("reopen-acct", 1_000)).await.expect("create account");
            store.create(conformance::token("reopen-tok", "reopen-acct")).await.expect("create token");
            let outcome = store.apply_usage(std::slice::from_ref(&record)).await.expect("apply usage");
            assert_eq!(outcome.applied, 1);
            store.revision().await.expect("revision")
        };

        let store = EmbeddedStore::open(&path).expect("reopen store");
        assert_eq!(store.revision().await.expect("revision"), revision, "revision after reopen");
        assert_eq!(*store.subscribe().borrow(), revision, "subscribe starts at the stored revision");
        let Some(Resource::Account(account)) = store.get(Kind::Account, "reopen-acct").await.expect("get") else {
            panic!("account lost on reopen");
        };
        assert_eq!((account.balance_micros, account.used_micros), (750, 250));
        let changes = store.changes_since(0).await.expect("changes").expect("feed reaches back to 0");
        assert_eq!(changes.len(), 2, "create, create (usage is not a change): {changes:?}");
        let again = store.apply_usage(&[record]).await.expect("apply usage again");
        assert_eq!((again.applied, again.duplicates), (0, 1), "request id forgotten on reopen");
        let usage = store.list_usage(&UsageFilter::default()).await.expect("list usage");
        assert_eq!(usage.len(), 1);
    }

    #[tokio::test]
    async fn permits_survive_a_reopen_and_stale_windows_are_pruned() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.redb");
        let now = now_unix();
        let current = now - now.rem_euclid(60);
        let stale = current - 600;
        {
            let store = EmbeddedStore::open(&path).expect("open store");
            assert_eq!(store.take_permits("token:t", current, 60, 10, 7).await.expect("take"), 7);
            assert_eq!(store.take_permits("token:t", stale, 60, 10, 4).await.expect("take"), 4);
        }
        let store = EmbeddedStore::open(&path).expect("reopen store");
        assert_eq!(store.take_permits("token:t", current, 60, 10, 7).await.expect("take"), 3, "count lost on reopen");
        // The take above pruned the stale window, which therefore starts over.
        assert_eq!(store.take_permits("token:t", stale, 60, 10, 10).await.expect("take"), 10, "stale window kept");
        use redb::ReadableTableMetadata as _;
        let txn = store.db.begin_read().expect("read");
        let permits = txn.open_table(PERMITS).expect("permits table");
        assert_eq!(permits.len().expect("len"), 2, "one row per live window");
    }
}
