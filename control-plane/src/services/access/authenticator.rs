//! Turns a presented key into a `Caller` and writes the audit log. Stored
//! credentials are looked up on every call, so a revoked or rotated secret
//! stops working at once on every replica sharing the store.

use std::sync::Arc;

use super::Caller;
use crate::domain::access::AuditEntry;
use crate::domain::keys::{KeyCheck, hash_key};
use crate::domain::{DISABLED, Kind, Resource, now_unix};
use crate::store::{Store, StoreError};

/// How often a credential's last use is written back, at most.
const TOUCH_EVERY_SECS: i64 = 60;

/// Why a key is not admitted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing credential")]
    Missing,
    #[error("invalid credential")]
    Invalid,
    /// An account credential whose account is disabled or gone.
    #[error("credential {credential} belongs to account {account:?}, which is disabled or gone")]
    AccountDisabled { credential: String, account: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Admits the bootstrap admin key and the credentials in the store.
pub struct Authenticator {
    root: KeyCheck,
    store: Arc<dyn Store>,
}

// === impl Authenticator ===

impl Authenticator {
    /// Admits `root_key` (the bootstrap admin key) and the credentials in
    /// `store`.
    pub fn new(root_key: &str, store: Arc<dyn Store>) -> Authenticator {
        Authenticator { root: KeyCheck::new(root_key), store }
    }

    /// The caller holding `key`; `Missing` or `Invalid` for no or an unknown
    /// key, `AccountDisabled` for an account credential whose account is
    /// disabled or gone, `Store` when the store cannot be read. Notes the
    /// credential's use, at most once a minute.
    pub async fn authenticate(&self, key: Option<&str>) -> Result<Caller, AuthError> {
        let key = key.ok_or(AuthError::Missing)?;
        if self.root.matches(key) {
            return Ok(Caller::root());
        }
        let credential = self.store.credential_by_key(&hash_key(key)).await?.ok_or(AuthError::Invalid)?;
        if !credential.account_id.is_empty() {
            let account = self.store.get(Kind::Account, &credential.account_id).await?;
            if !matches!(&account, Some(Resource::Account(a)) if a.status != DISABLED) {
                return Err(AuthError::AccountDisabled {
                    credential: credential.id.clone(),
                    account: credential.account_id.clone(),
                });
            }
        }
        let now = now_unix();
        if now - credential.last_used_at >= TOUCH_EVERY_SECS
            && let Err(error) = self.store.touch_credential(&credential.id, now).await
        {
            tracing::warn!(%error, credential = %credential.id, "could not record a credential's use");
        }
        Ok(Caller::of(&credential))
    }

    /// Appends one audit entry of `caller` calling `method` on a `kind`,
    /// about the target the caller noted; a failure is logged, never the
    /// caller's.
    pub async fn audit(&self, caller: &Caller, method: &str, kind: &str, outcome: String) {
        let entry = AuditEntry {
            seq: 0,
            at: now_unix(),
            actor_id: caller.id.clone(),
            actor_role: caller.role,
            method: method.to_owned(),
            kind: kind.to_owned(),
            target: caller.noted_target(),
            outcome,
        };
        if let Err(error) = self.store.append_audit(&entry).await {
            tracing::error!(%error, method, actor = %caller.id, "could not write the audit log");
        }
    }
}
