//! The credential and audit RPCs of the admin service: mint, import, list,
//! revoke and rotate credentials, and page through the audit log. A secret
//! is shown once, in the answer that made it; the store keeps its hash.
//! Every secret follows the key rules of `keys`: long enough, and never the
//! secret of another role (the admin key, the node key, a token, another
//! credential).

use std::sync::Arc;

use gw_proto::pb;
use tonic::Status;

use crate::domain::access::{AuditFilter, Credential, KEY_PREFIX, Role, display_prefix};
use crate::domain::keys::{self, KeyError};
use crate::domain::{Kind, Resource, now_unix};
use crate::store::Store;
use crate::{
    api::admin::{is, page},
    domain::keys::{hash_key, new_id},
};

/// The credential and audit calls of one replica.
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

    /// Stores a credential with the imported secret `key`, or a minted one
    /// when it is empty; answers it with the secret. InvalidArgument for a
    /// bad role, a missing or superfluous account, or a secret the key rules
    /// refuse; AlreadyExists when another credential has the secret.
    pub async fn create(&self, request: pb::CreateCredentialRequest) -> Result<pb::CreatedCredential, Status> {
        let role = Role::parse(&request.role).ok_or_else(|| {
            let roles: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
            Status::invalid_argument(format!("role must be one of {}", roles.join(", ")))
        })?;
        let account_id = request.account_id.trim().to_owned();
        match (role, account_id.is_empty()) {
            (Role::Account, true) => return Err(Status::invalid_argument("an account credential needs an account")),
            (Role::Account, false) => {
                if self.store.get(Kind::Account, &account_id).await?.is_none() {
                    return Err(Status::failed_precondition(format!("account {account_id:?} not found")));
                }
            }
            (_, false) => return Err(Status::invalid_argument(format!("a {role} credential has no account"))),
            (_, true) => {}
        }
        let key = if request.key.is_empty() { keys::generate(KEY_PREFIX) } else { request.key };
        let key_hash = self.check_key(&key).await?;
        let credential = Credential {
            id: new_id("cred"),
            name: request.name.trim().to_owned(),
            role,
            account_id,
            key_hash,
            key_prefix: display_prefix(&key),
            created_at: now_unix(),
            last_used_at: 0,
            rotated_at: 0,
        };
        self.store.create_credential(&credential).await?;
        Ok(pb::CreatedCredential { credential: Some(credential.into()), key })
    }

    /// A page of credentials in id order, filtered by account and name.
    pub async fn list(&self, request: pb::ListRequest) -> Result<pb::ListCredentialsResponse, Status> {
        let credentials = self.store.list_credentials().await?;
        let keep = |c: &Credential| is(&request.account_id, &c.account_id) && is(&request.name, &c.name);
        let (items, next_page_token) = page(credentials, |c| &c.id, keep, &request);
        Ok(pb::ListCredentialsResponse { items: items.into_iter().map(Into::into).collect(), next_page_token })
    }

    /// Deletes credential `id`; its secret stops working at once. NotFound
    /// when there is none.
    pub async fn revoke(&self, id: &str) -> Result<(), Status> {
        Ok(self.store.delete_credential(id).await?)
    }

    /// Mints a new secret for credential `id` and answers it; the old one
    /// stops working in the same write. NotFound when there is none.
    pub async fn rotate(&self, id: &str) -> Result<pb::CreatedCredential, Status> {
        let key = keys::generate(KEY_PREFIX);
        let key_hash = self.check_key(&key).await?;
        let credential = self.store.rekey_credential(id, &key_hash, &display_prefix(&key), now_unix()).await?;
        Ok(pb::CreatedCredential { credential: Some(credential.into()), key })
    }

    /// A page of the audit log, newest first.
    pub async fn audit(&self, request: pb::ListAuditRequest) -> Result<pb::ListAuditResponse, Status> {
        if request.from > 0 && request.to > 0 && request.from >= request.to {
            return Err(Status::invalid_argument("from must be before to"));
        }
        let filter = AuditFilter {
            actor_id: request.actor_id,
            kind: request.kind,
            from: request.from,
            to: request.to,
            limit: request.limit as usize,
            cursor: request.page_token,
        };
        let page = self.store.list_audit(&filter).await?;
        Ok(pb::ListAuditResponse {
            items: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next,
        })
    }

    /// The hash of `key` when the key rules admit it as a credential's
    /// secret; InvalidArgument naming the rule otherwise. (Another
    /// credential's secret is refused by the store, atomically.)
    async fn check_key(&self, key: &str) -> Result<String, Status> {
        keys::check_length(key, "credential").map_err(|error| Status::invalid_argument(error.to_string()))?;
        let hash = hash_key(key);
        let reused = |other| Status::invalid_argument(KeyError::Reused { role: "credential", other }.to_string());
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
