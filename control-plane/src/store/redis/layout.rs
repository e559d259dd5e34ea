//! Every key the Redis store uses, and the hash tag that places it in a
//! Redis Cluster slot; and the one-time rename of a store written before
//! keys carried tags.
//!
//! Slots: every Lua script and MULTI/EXEC touches keys of one slot only.
//! - `{gw}` holds policy and the ledger: the kind hashes, counter hashes,
//!   name indexes, revision, change feed, usage list, idempotency markers,
//!   leases, rollups and the lineage. They share one slot because one step
//!   needs them together: a write bumps the revision and appends to the feed;
//!   a charge reads a token's quota and its account's balance from the kind
//!   hashes, checks every lease of both, and writes the record, its counters
//!   and its rollups at once; a snapshot reads resources and counters at one
//!   revision. Spreading balances or leases by account would make a charge a
//!   cross-slot transaction, so the ledger scales with the one node holding
//!   `{gw}` (the other slots and replicas take the rest of the load).
//!   Top-up codes live here too: a redemption marks the code and credits
//!   the balance in one script.
//! - `{gw:cred}` the credentials and their indexes, `{gw:audit}` the audit
//!   log and its sequence, `{gw:video}` video tasks and their indexes, `{gw:batch}` files and
//!   batches and theirs, `{gw:console}` console users and their indexes: each written by
//!   scripts of its own, so each gets a slot of its own.
//! - `gw:fleet`, `gw:lock:<name>`, `gw:permits:<key>:<window>`,
//!   `gw:slots:<key>`, `gw:session:<hash>`, `gw:ticket:<hash>`: one key per
//!   command or script, so no tag; each lands wherever its name hashes,
//!   which spreads the permit and in-flight counters (and sessions) over
//!   the cluster.
//!
//! Stores written before tags used `gw:<rest>` for all of these. On a single
//! Redis, `migrate` renames such keys to their tagged names once (the marker
//! `{gw}:layout` says it ran); a cluster never held the old names, since the
//! old scripts could not run there.

use redis::{AsyncCommands as _, Script};

use super::conn::Conn;
use crate::domain::Kind;
use crate::store::{Result, StoreError};

/// The revision, an integer.
pub(super) const REV: &str = "{gw}:rev";
/// The change feed, a stream.
pub(super) const CHANGES: &str = "{gw}:changes";
/// Usage records, a list, newest applied first.
pub(super) const USAGE: &str = "{gw}:usage";
/// `USAGE` while a batch's rows are pushed to it beside the usage script,
/// inside one MULTI/EXEC (see `ledger`); it exists only within that.
pub(super) const USAGE_OPEN: &str = "{gw}:usage_open";
pub(super) const BALANCE: &str = "{gw}:balance";
pub(super) const ACCOUNT_USED: &str = "{gw}:account_used";
pub(super) const TOKEN_USED: &str = "{gw}:token_used";
pub(super) const LINEAGE: &str = "{gw}:lineage";
/// Set once the keys of an untagged store were renamed.
const LAYOUT: &str = "{gw}:layout";

pub(super) const CREDENTIALS: &str = "{gw:cred}:cred";
pub(super) const CREDENTIAL_KEYS: &str = "{gw:cred}:cred_key";
pub(super) const CREDENTIALS_USED: &str = "{gw:cred}:cred_used";
pub(super) const AUDIT: &str = "{gw:audit}:audit";
pub(super) const AUDIT_SEQ: &str = "{gw:audit}:audit_seq";

pub(super) const VIDEOS: &str = "{gw:video}:video";
pub(super) const VIDEOS_BY_TIME: &str = "{gw:video}:video_time";
pub(super) const VIDEOS_OPEN: &str = "{gw:video}:video_open";

/// Files and batches (`store::batch`); these never had untagged names.
pub(super) const BATCH_FILES: &str = "{gw:batch}:file";
pub(super) const BATCHES: &str = "{gw:batch}:batch";
pub(super) const BATCHES_OPEN: &str = "{gw:batch}:batch_open";

/// Top-up codes, a hash id → JSON; in `{gw}`, with the balances.
pub(super) const TOPUP: &str = "{gw}:topup";
/// Top-up code hash → id.
pub(super) const TOPUP_HASH: &str = "{gw}:topup_hash";

/// Console users, a hash id → JSON (without the last sign-in).
pub(super) const USERS: &str = "{gw:console}:user";
/// User name → id.
pub(super) const USER_NAMES: &str = "{gw:console}:user_name";
/// User id → Unix second of the last sign-in.
pub(super) const USERS_LOGIN: &str = "{gw:console}:user_login";

pub(super) const FLEET: &str = "gw:fleet";

/// Old names renamed per script call.
const MIGRATE_BATCH: usize = 500;

/// Keys: pairs of old and new name. Renames each old key that exists to
/// its new name unless that exists too. Returns `{renamed, kept}` (kept:
/// both names existed; the old one is left alone).
const RENAME: &str = r"
local renamed, kept = 0, 0
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if redis.call('EXISTS', KEYS[i + 1]) == 0 then
      redis.call('RENAME', KEYS[i], KEYS[i + 1])
      renamed = renamed + 1
    else
      kept = kept + 1
    end
  end
end
return {renamed, kept}
";

/// The hash of resources of `kind`, id → JSON.
pub(super) fn kind_key(kind: Kind) -> String {
    format!("{{gw}}:{kind}")
}

/// The name index of `kind` (unused for kinds without unique names).
pub(super) fn names_key(kind: Kind) -> String {
    format!("{{gw}}:names:{kind}")
}

/// The idempotency marker of a usage record as earlier versions wrote it,
/// a key of its own expiring after `APPLIED_TTL_SECS`: never written, and
/// read only for records made before `LEGACY_MARKERS_BEFORE`.
pub(super) fn applied_key(request_id: &str) -> String {
    // One per usage record: a concatenation, not `format!`'s machinery.
    ["{gw}:applied:", request_id].concat()
}

/// The Unix second before which a record may have been made by a version
/// that marked it with `applied_key` (0: no such key exists), an integer
/// set once per store: the records made since are marked only in their
/// hour's set (or, by earlier versions, hash), so their markers are looked
/// for only there.
pub(super) const LEGACY_MARKERS_BEFORE: &str = "{gw}:legacy_markers_before";
/// How far past the first start of a version that no longer writes
/// `applied_key` markers a record marked by an older one may be dated: the
/// ledger takes records dated up to an hour ahead of its clock.
const LEGACY_MARKERS_MARGIN_SECS: i64 = 24 * 60 * 60;

/// How many seconds of records (by `created_at`) one set of idempotency
/// markers holds.
pub(super) const APPLIED_BUCKET_SECS: i64 = 3_600;
/// The starts of the marker hours that exist (a set, a hash or both), a
/// sorted set scored by start, so that `prune` finds the old ones.
pub(super) const APPLIED_BUCKETS: &str = "{gw}:applied_hours";

/// The idempotency markers of the records made in the hour starting at
/// `start` as earlier versions kept them: a hash request id → 1, without
/// expiry; read while it exists, never written (`prune` removes it with
/// `applied_set_key`).
pub(super) fn applied_bucket_key(start: i64) -> String {
    format!("{{gw}}:applied_hour:{start}")
}

/// The idempotency markers of the records made in the hour starting at
/// `start`: a set of request ids, without expiry (`prune` removes it once
/// the ledger rows it guards are gone and no record of its hour can be
/// applied any more). A set rather than a hash: looking up and adding a
/// run of members takes Redis about 2k instructions a record fewer than
/// fields with values.
pub(super) fn applied_set_key(start: i64) -> String {
    format!("{{gw}}:applied_hour:{start}:set")
}

/// The hash of leases of one budget (`token:<id>` or `account:<id>`).
pub(super) fn hold_key(budget: &impl std::fmt::Display) -> String {
    format!("{{gw}}:hold:{budget}")
}

/// The spend of one bucket of a window budget (see `calendar`).
pub(super) fn window_key(budget: &impl std::fmt::Display, bucket: &str) -> String {
    format!("{{gw}}:win:{budget}:{bucket}")
}

/// Stands in for the window bucket of a budget without a window: a key of
/// the same slot that is never written.
pub(super) const NO_WINDOW: &str = "{gw}:win:-";

/// The rollup bucket hash of `period` (`hour`, `day`) starting at `start`.
pub(super) fn rollup_key(period: &str, start: i64) -> String {
    format!("{{gw}}:rollup:{period}:{start}")
}

/// The sorted set of one account's video tasks.
pub(super) fn videos_of_account(account_id: &str) -> String {
    format!("{{gw:video}}:video_acct:{account_id}")
}

pub(super) fn batch_files_of_account(account_id: &str) -> String {
    format!("{{gw:batch}}:file_acct:{account_id}")
}

pub(super) fn batches_of_account(account_id: &str) -> String {
    format!("{{gw:batch}}:batch_acct:{account_id}")
}

/// A console session, a hash expiring with it; a key of its own.
pub(super) fn session_key(id_hash: &str) -> String {
    format!("gw:session:{id_hash}")
}

/// A one-time ticket, a string of JSON expiring with it; a key of its own.
pub(super) fn ticket_key(hash: &str) -> String {
    format!("gw:ticket:{hash}")
}

/// A named lock; a key of its own.
pub(super) fn lock_key(name: &str) -> String {
    format!("gw:lock:{name}")
}

/// In-flight slots of a concurrency limit `key`, a hash holder → slots.
pub(super) fn slots_key(key: &str) -> String {
    format!("gw:slots:{key}")
}

/// Permits granted for `key` in the window starting at `window_start`.
pub(super) fn permits_key(key: &str, window_start: i64) -> String {
    format!("gw:permits:{key}:{window_start}")
}

/// The tagged name of the untagged key `old`; `None` when it keeps its
/// name (single-key state) or is not the store's.
pub(super) fn tagged_name(old: &str) -> Option<String> {
    let rest = old.strip_prefix("gw:")?;
    let single = ["lock:", "permits:", "slots:", "session:", "ticket:"];
    if rest == "fleet" || single.iter().any(|prefix| rest.starts_with(prefix)) {
        return None;
    }
    let tag = match rest {
        "cred" | "cred_key" | "cred_used" => "gw:cred",
        "audit" | "audit_seq" => "gw:audit",
        "video" | "video_time" | "video_open" => "gw:video",
        "user" | "user_name" | "user_login" => "gw:console",
        _ if rest.starts_with("video_acct:") => "gw:video",
        _ => "gw",
    };
    Some(format!("{{{tag}}}:{rest}"))
}

/// `LEGACY_MARKERS_BEFORE`, decided the first time a control plane of this
/// version opens the store and kept: 0 when no `applied_key` marker exists
/// (a single Redis is scanned for one; a cluster is looked at only when it
/// holds nothing yet), else now plus a margin for records dated ahead of
/// the clock that marked them. Replicas starting at once agree (the first
/// to write it wins).
pub(super) async fn legacy_markers_before(conn: &Conn) -> Result<i64> {
    let mut conn = conn.clone();
    if let Some(before) = conn.get::<_, Option<i64>>(LEGACY_MARKERS_BEFORE).await.map_err(StoreError::Redis)? {
        return Ok(before);
    }
    let none = if conn.is_cluster() {
        !conn.exists::<_, bool>(REV).await.map_err(StoreError::Redis)?
    } else {
        let mut scanning = conn.clone();
        let mut legacy = scanning.scan_match::<_, String>(applied_key("*")).await.map_err(StoreError::Redis)?;
        legacy.next_item().await.transpose().map_err(StoreError::Redis)?.is_none()
    };
    let before = if none { 0 } else { crate::domain::now_unix() + LEGACY_MARKERS_MARGIN_SECS };
    let _: bool = conn.set_nx(LEGACY_MARKERS_BEFORE, before).await.map_err(StoreError::Redis)?;
    let stored: Option<i64> = conn.get(LEGACY_MARKERS_BEFORE).await.map_err(StoreError::Redis)?;
    Ok(stored.unwrap_or(before))
}

/// Renames the keys of a store written before keys had hash tags, once:
/// a no-op on a cluster, or once `{gw}:layout` is set. Several replicas
/// may run it at once; each key is renamed by one of them. Old replicas
/// must be stopped first: they would keep writing the old names.
pub(super) async fn migrate(conn: &Conn) -> Result<()> {
    if conn.is_cluster() {
        return Ok(());
    }
    let mut conn = conn.clone();
    if conn.exists::<_, bool>(LAYOUT).await.map_err(StoreError::Redis)? {
        return Ok(());
    }
    let script = Script::new(RENAME);
    let (mut renamed, mut kept) = (0u64, 0u64);
    let mut rename = async |batch: &mut Vec<(String, String)>| -> Result<()> {
        let mut call = script.prepare_invoke();
        for (old, new) in batch.drain(..) {
            call.key(old).key(new);
        }
        let (r, k): (u64, u64) = call.invoke_async(&mut conn.clone()).await.map_err(StoreError::Redis)?;
        renamed += r;
        kept += k;
        Ok(())
    };
    // Renamed keys no longer match the pattern, and SCAN still returns
    // every key that matched throughout: renaming while scanning is safe.
    let mut scanning = conn.clone();
    let mut keys = scanning.scan_match::<_, String>("gw:*").await.map_err(StoreError::Redis)?;
    let mut batch = Vec::with_capacity(MIGRATE_BATCH);
    while let Some(key) = keys.next_item().await {
        let key = key.map_err(StoreError::Redis)?;
        if let Some(new) = tagged_name(&key) {
            batch.push((key, new));
        }
        if batch.len() == MIGRATE_BATCH {
            rename(&mut batch).await?;
        }
    }
    if !batch.is_empty() {
        rename(&mut batch).await?;
    }
    if renamed > 0 || kept > 0 {
        tracing::info!(renamed, kept, "renamed the redis store's keys to their cluster-safe names");
    }
    if kept > 0 {
        tracing::warn!(kept, "some old redis keys were left alone: their new names already existed");
    }
    let _: () = conn.set(LAYOUT, "tagged").await.map_err(StoreError::Redis)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_names_map_to_the_slot_of_their_scripts() {
        assert_eq!(tagged_name("gw:rev").as_deref(), Some(REV));
        assert_eq!(tagged_name("gw:account").as_deref(), Some(kind_key(Kind::Account).as_str()));
        assert_eq!(tagged_name("gw:applied:r1").as_deref(), Some(applied_key("r1").as_str()));
        assert_eq!(tagged_name("gw:rollup:hour:3600").as_deref(), Some(rollup_key("hour", 3600).as_str()));
        assert_eq!(tagged_name("gw:cred_used").as_deref(), Some(CREDENTIALS_USED));
        assert_eq!(tagged_name("gw:audit_seq").as_deref(), Some(AUDIT_SEQ));
        assert_eq!(tagged_name("gw:video_acct:a1").as_deref(), Some(videos_of_account("a1").as_str()));
        assert_eq!(tagged_name("gw:video_open").as_deref(), Some(VIDEOS_OPEN));
        assert_eq!(tagged_name("gw:user_name").as_deref(), Some(USER_NAMES));
        assert_eq!(tagged_name("gw:topup_hash").as_deref(), Some(TOPUP_HASH));
        assert_eq!(tagged_name("gw:session:abc"), None);
        assert_eq!(tagged_name("gw:ticket:abc"), None);
        assert_eq!(tagged_name("gw:fleet"), None);
        assert_eq!(tagged_name("gw:lock:poller"), None);
        assert_eq!(tagged_name("gw:permits:k:60"), None);
        assert_eq!(tagged_name("gw:slots:token:t1"), None);
        assert_eq!(
            tagged_name("gw:win:token:t1:2026-11-23").as_deref(),
            Some(window_key(&"token:t1", "2026-11-23").as_str())
        );
        assert_eq!(tagged_name("other"), None);
    }
}
