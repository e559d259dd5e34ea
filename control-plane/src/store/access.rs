//! The store's part of admin access: credentials (by id, and by the hash of
//! their secret, which is unique) and the audit log, a bounded list of the
//! newest `AUDIT_RETAIN` entries. Neither bumps the policy revision: data
//! planes never see them.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;

use super::Result;
use crate::domain::access::{AuditEntry, AuditFilter, AuditPage, Credential};

/// Audit entries kept; older ones are dropped as new ones come.
pub const AUDIT_RETAIN: u64 = 100_000;
/// Audit entries read at most per `list_audit` call.
pub const AUDIT_SCAN: usize = 10_000;

/// Credentials and the audit log. Every `Store` is one.
#[async_trait]
pub trait AccessStore: Send + Sync {
    /// Stores a new credential; `CredentialExists` when its id is taken and
    /// `KeyTaken` when another credential has its key hash, atomically, so
    /// two concurrent imports of one secret never both succeed.
    async fn create_credential(&self, credential: &Credential) -> Result<()>;

    /// One credential, or `None`.
    async fn get_credential(&self, id: &str) -> Result<Option<Credential>>;

    /// The credential whose secret hashes to `key_hash`, or `None`.
    async fn credential_by_key(&self, key_hash: &str) -> Result<Option<Credential>>;

    /// Every credential, ordered by id.
    async fn list_credentials(&self) -> Result<Vec<Credential>>;

    /// Replaces the secret of credential `id` (its hash and prefix) and sets
    /// `rotated_at`; the old hash stops finding it in the same write.
    /// `NoCredential` when absent, `KeyTaken` when the new hash is in use.
    async fn rekey_credential(&self, id: &str, key_hash: &str, key_prefix: &str, at: i64) -> Result<Credential>;

    /// Removes credential `id` and its key hash; `NoCredential` when absent.
    async fn delete_credential(&self, id: &str) -> Result<()>;

    /// Records that credential `id` authenticated a call at `at`; nothing
    /// when it no longer exists.
    async fn touch_credential(&self, id: &str, at: i64) -> Result<()>;

    /// Appends `entry` with the next sequence number (its own `seq` is
    /// ignored), dropping the oldest past `AUDIT_RETAIN`; returns the number.
    async fn append_audit(&self, entry: &AuditEntry) -> Result<u64>;

    /// Audit entries, newest first, filtered: one page of at most
    /// `filter.limit()` after `filter.cursor`. A page reads at most
    /// `AUDIT_SCAN` entries, so it may hold fewer than the limit and still
    /// have a `next`. `BadCursor` for a cursor no page gave out.
    async fn list_audit(&self, filter: &AuditFilter) -> Result<AuditPage>;
}

/// Pages through `entries` (newest first, each `seq` below the cursor):
/// keeps those that pass `filter` up to its limit, and says where the next
/// page starts: after the last entry looked at, when the scan stopped before
/// the log's end (`more`).
pub fn audit_page(filter: &AuditFilter, entries: impl IntoIterator<Item = AuditEntry>, more: bool) -> AuditPage {
    let limit = filter.limit();
    let mut page = AuditPage::default();
    let mut last_seen = None;
    let mut stopped = false;
    for entry in entries {
        last_seen = Some(entry.seq);
        if filter.matches(&entry) {
            page.items.push(entry);
            if page.items.len() == limit {
                stopped = true;
                break;
            }
        }
    }
    if let Some(seq) = last_seen.filter(|seq| (stopped || more) && *seq > 1) {
        page.next = seq.to_string();
    }
    page
}
