//! Stored credentials: mint or import, list, revoke and rotate, and the
//! audit log's pages. A secret is returned once, by the call that made it;
//! the store keeps its hash. Every secret follows the key rules of
//! `domain::keys`: long enough, and never the secret of another role (the
//! admin key, the node key, a token, another credential).

use std::sync::Arc;

use crate::domain::access::{AuditFilter, AuditPage, Credential, KEY_PREFIX, Role, display_prefix};
use crate::domain::keys::{self, KeyError, hash_key, new_id};
use crate::domain::{Kind, Resource, now_unix};
use crate::store::{Store, StoreError};

/// Why a credential call is refused.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The request breaks a rule; the text says which.
    #[error("{0}")]
    Invalid(String),
    /// The account an account credential names does not exist.
    #[error("account {0:?} not found")]
    NoAccount(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A credential to create: its role (as spelled in `Role`), its account
/// (for `account` credentials only), a name, and the secret to import
/// (empty to mint one).
#[derive(Debug, Clone, Default)]
pub struct NewCredential {
    pub role: String,
    pub account_id: String,
    pub name: String,
    pub key: String,
}

/// The credential calls of one replica.
pub struct Credentials {
    store: Arc<dyn Store>,
    /// Hashes of the keys no credential may reuse, with their roles.
    reserved: Vec<(&'static str, String)>,
}

// === impl Credentials ===

impl Credentials {
    /// `reserved` holds the hashes of the admin and node keys (`Keys::reserved`).
    pub fn new(store: Arc<dyn Store>, reserved: Vec<(&'static str, String)>) -> Credentials {
        Credentials { store, reserved }
    }

    /// Stores the credential `new` asks for and returns it with its secret.
    /// `Invalid` for a bad role, a missing or superfluous account, or a
    /// secret the key rules refuse; `NoAccount` for an unknown account;
    /// the store's `CredentialExists`/`KeyTaken` when another credential
    /// has the id or the secret.
    pub async fn create(&self, new: NewCredential) -> Result<(Credential, String), CredentialError> {
        let role = Role::parse(&new.role).ok_or_else(|| {
            let roles: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
            CredentialError::Invalid(format!("role must be one of {}", roles.join(", ")))
        })?;
        let account_id = new.account_id.trim().to_owned();
        match (role, account_id.is_empty()) {
            (Role::Account, true) => {
                return Err(CredentialError::Invalid("an account credential needs an account".into()));
            }
            (Role::Account, false) => {
                if self.store.get(Kind::Account, &account_id).await?.is_none() {
                    return Err(CredentialError::NoAccount(account_id));
                }
            }
            (_, false) => return Err(CredentialError::Invalid(format!("a {role} credential has no account"))),
            (_, true) => {}
        }
        let key = if new.key.is_empty() { keys::generate(KEY_PREFIX) } else { new.key };
        let key_hash = self.check_key(&key).await?;
        let credential = Credential {
            id: new_id("cred"),
            name: new.name.trim().to_owned(),
            role,
            account_id,
            key_hash,
            key_prefix: display_prefix(&key),
            created_at: now_unix(),
            last_used_at: 0,
            rotated_at: 0,
        };
        self.store.create_credential(&credential).await?;
        Ok((credential, key))
    }

    /// Every credential, in id order.
    pub async fn list(&self) -> Result<Vec<Credential>, CredentialError> {
        Ok(self.store.list_credentials().await?)
    }

    /// Deletes credential `id`; its secret stops working at once. The
    /// store's `NoCredential` when there is none.
    pub async fn revoke(&self, id: &str) -> Result<(), CredentialError> {
        Ok(self.store.delete_credential(id).await?)
    }

    /// Mints a new secret for credential `id` and returns it; the old one
    /// stops working in the same write. The store's `NoCredential` when
    /// there is none.
    pub async fn rotate(&self, id: &str) -> Result<(Credential, String), CredentialError> {
        let key = keys::generate(KEY_PREFIX);
        let key_hash = self.check_key(&key).await?;
        let credential = self.store.rekey_credential(id, &key_hash, &display_prefix(&key), now_unix()).await?;
        Ok((credential, key))
    }

    /// A page of the audit log, newest first; `Invalid` when `from` is not
    /// before `to`.
    pub async fn audit(&self, filter: &AuditFilter) -> Result<AuditPage, CredentialError> {
        if filter.from > 0 && filter.to > 0 && filter.from >= filter.to {
            return Err(CredentialError::Invalid("from must be before to".into()));
        }
        Ok(self.store.list_audit(filter).await?)
    }

    /// The hash of `key` when the key rules admit it as a credential's
    /// secret; `Invalid` naming the rule otherwise. (Another credential's
    /// secret is refused by the store, atomically.)
    async fn check_key(&self, key: &str) -> Result<String, CredentialError> {
        keys::check_length(key, "credential").map_err(|error| CredentialError::Invalid(error.to_string()))?;
        let hash = hash_key(key);
        let reused = |other| CredentialError::Invalid(KeyError::Reused { role: "credential", other }.to_string());
        if let Some((role, _)) = self.reserved.iter().find(|(_, reserved)| *reserved == hash) {
            return Err(reused(role));
        }
        let tokens = self.store.list(Kind::Token).await?;
        if tokens.iter().any(|t| matches!(t, Resource::Token(token) if token.key_hash == hash)) {
            return Err(reused("token"));
        }
        Ok(hash)
    }
}
