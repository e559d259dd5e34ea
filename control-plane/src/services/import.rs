//! `ImportTokens`: tokens created in batches. Each request is validated row
//! by row as `CreateToken` validates (account, group the account may use,
//! quota, addresses, rate limit), then written with one
//! `Store::import_tokens` call: one atomic write and one revision per batch.
//! A row that fails is answered with its reason and the rest are written;
//! a minted key is in the answer and nowhere else.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::keys::{display_prefix, hash_key, new_id, new_key};
use crate::domain::validate::{check_ip_list, check_rate_limit, clean_list, status_value};
use crate::domain::{Account, DISABLED, ENABLED, Kind, RateLimit, Resource, Token, calendar::WindowBudget, now_unix};
use crate::store::{Store, StoreError};
use crate::{domain::access::AuditEntry, services::access::Caller};

/// Rows one request may carry.
pub const MAX_BATCH: usize = 5_000;
/// Shortest and longest key an import accepts.
const KEY_LEN: std::ops::RangeInclusive<usize> = 16..=256;

/// Why a batch fails as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("a batch holds at most {MAX_BATCH} tokens, this one {0}")]
    TooLarge(usize),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One row of an import, as the client described the token.
#[derive(Debug, Clone)]
pub struct ImportRow {
    pub account_id: String,
    /// Empty for `default`.
    pub group: String,
    pub name: String,
    /// Empty to mint one.
    pub key: String,
    /// Empty for enabled.
    pub status: String,
    pub expires_at: i64,
    pub unlimited: bool,
    pub quota_micros: i64,
    pub models: Vec<String>,
    pub allow_ips: Vec<String>,
    pub rate_limit: RateLimit,
    /// The window budget, or why the one given could not be read.
    pub window: Result<Option<WindowBudget>, String>,
    pub tokens_per_minute: u32,
    pub max_in_flight: u32,
}

/// What became of one row: its id, minted key (empty when the row gave
/// one) and prefix when written, otherwise `error`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportedRow {
    pub index: u32,
    pub id: String,
    pub key: String,
    pub key_prefix: String,
    pub error: String,
}

/// One import stream's state: accounts and groups looked up once each.
pub struct Import {
    store: Arc<dyn Store>,
    accounts: HashMap<String, Option<Account>>,
    groups: HashMap<String, bool>,
    imported: u64,
    refused: u64,
}

/// A row that passed validation, and the key minted for it, if any.
struct Valid {
    token: Token,
    minted: String,
}

// === impl Import ===

impl Import {
    pub fn new(store: Arc<dyn Store>) -> Import {
        Import { store, accounts: HashMap::new(), groups: HashMap::new(), imported: 0, refused: 0 }
    }

    /// Records one audit entry for `caller` with the stream's totals and
    /// `outcome` (how the stream ended).
    pub async fn record(&self, caller: &Caller, outcome: String) {
        let entry = AuditEntry {
            seq: 0,
            at: now_unix(),
            actor_id: caller.id.clone(),
            actor_role: caller.role,
            method: "ImportTokens".into(),
            kind: "token".into(),
            target: format!("{} imported, {} refused", self.imported, self.refused),
            outcome,
        };
        if let Err(error) = self.store.append_audit(&entry).await {
            tracing::error!(%error, actor = %caller.id, "could not write the audit log");
        }
    }

    /// Validates and writes one batch; the answer has a result per row.
    /// Fails as a whole only for a batch over `MAX_BATCH` or a store error.
    /// Returns the rows' results in order and the revision of the write
    /// (0 when nothing was written).
    pub async fn batch(&mut self, rows: Vec<ImportRow>) -> Result<(Vec<ImportedRow>, u64), ImportError> {
        if rows.len() > MAX_BATCH {
            return Err(ImportError::TooLarge(rows.len()));
        }
        let mut results = Vec::with_capacity(rows.len());
        let mut valid = Vec::with_capacity(rows.len());
        for (index, row) in rows.into_iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            match self.validate(row).await? {
                Ok(row) => {
                    results.push(ImportedRow { index, ..Default::default() });
                    valid.push((results.len() - 1, row));
                }
                Err(error) => results.push(ImportedRow { index, error, ..Default::default() }),
            }
        }
        let tokens = valid.iter().map(|(_, row)| row.token.clone()).collect();
        let imported = self.store.import_tokens(tokens).await?;
        for ((at, row), refused) in valid.into_iter().zip(imported.rows) {
            let result = &mut results[at];
            match refused {
                None => {
                    result.id = row.token.id;
                    result.key = row.minted;
                    result.key_prefix = row.token.key_prefix;
                }
                Some(error) => result.error = error.to_string(),
            }
        }
        let written = results.iter().filter(|r| r.error.is_empty()).count() as u64;
        self.imported += written;
        self.refused += results.len() as u64 - written;
        Ok((results, imported.revision.unwrap_or(0)))
    }

    /// The token a row describes, or why it is refused (the outer error is
    /// the store's, failing the batch).
    async fn validate(&mut self, row: ImportRow) -> Result<Result<Valid, String>, StoreError> {
        let account_id = row.account_id.trim().to_owned();
        if account_id.is_empty() {
            return Ok(Err("account is required".into()));
        }
        let Some(account) = self.account(&account_id).await? else {
            return Ok(Err(format!("account {account_id:?} not found")));
        };
        let group = match row.group.trim() {
            "" => "default".to_owned(),
            group => group.to_owned(),
        };
        if !self.group_exists(&group).await? {
            return Ok(Err(format!("group {group:?} not found")));
        }
        if !account.groups.is_empty() && !account.groups.contains(&group) {
            return Ok(Err(format!("account {account_id:?} may not use group {group:?}")));
        }
        if !row.unlimited && row.quota_micros < 0 {
            return Ok(Err("quota must not be negative".into()));
        }
        let status = match row.status.trim() {
            "" => ENABLED.to_owned(),
            status => match status_value(status, &[ENABLED, DISABLED]) {
                Ok(status) => status,
                Err(refused) => return Ok(Err(refused.0)),
            },
        };
        let allow_ips = clean_list(row.allow_ips);
        let rate_limit = row.rate_limit;
        if let Err(refused) = check_ip_list(&allow_ips).and_then(|()| check_rate_limit(&rate_limit)) {
            return Ok(Err(refused.0));
        }
        let window = match row.window {
            Ok(window) => window,
            Err(refused) => return Ok(Err(refused)),
        };
        let (key, minted) = match row.key.trim() {
            "" => {
                let key = new_key();
                (key.clone(), key)
            }
            key => {
                if let Err(reason) = check_key(key) {
                    return Ok(Err(reason));
                }
                (key.to_owned(), String::new())
            }
        };
        let token = Token {
            id: new_id("tok"),
            account_id,
            group,
            name: row.name,
            key_hash: hash_key(&key),
            key_prefix: display_prefix(&key),
            status,
            expires_at: row.expires_at,
            unlimited: row.unlimited,
            quota_micros: if row.unlimited { 0 } else { row.quota_micros },
            used_micros: 0,
            models: clean_list(row.models),
            allow_ips,
            rate_limit,
            created_at: now_unix(),
            tokens_per_minute: row.tokens_per_minute,
            max_in_flight: row.max_in_flight,
            window,
        };
        Ok(Ok(Valid { token, minted }))
    }

    async fn account(&mut self, id: &str) -> Result<Option<Account>, StoreError> {
        if let Some(known) = self.accounts.get(id) {
            return Ok(known.clone());
        }
        let account = match self.store.get(Kind::Account, id).await? {
            Some(Resource::Account(account)) => Some(account),
            _ => None,
        };
        self.accounts.insert(id.to_owned(), account.clone());
        Ok(account)
    }

    async fn group_exists(&mut self, name: &str) -> Result<bool, StoreError> {
        if let Some(known) = self.groups.get(name) {
            return Ok(*known);
        }
        let exists = self.store.get(Kind::Group, name).await?.is_some();
        self.groups.insert(name.to_owned(), exists);
        Ok(exists)
    }
}

/// A key given to an import: printable ASCII without spaces, of a sensible
/// length (data planes match it byte for byte).
fn check_key(key: &str) -> Result<(), String> {
    if !KEY_LEN.contains(&key.len()) {
        return Err(format!("a key must be {} to {} characters long", KEY_LEN.start(), KEY_LEN.end()));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a key must be printable ASCII without spaces".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_for_length_and_characters() {
        assert!(check_key("sk-0123456789abcdef").is_ok());
        assert!(check_key("short").is_err());
        assert!(check_key("sk-0123456789 abcdef").is_err());
        assert!(check_key(&"x".repeat(257)).is_err());
    }
}
