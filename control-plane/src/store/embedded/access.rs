//! Credentials and the audit log in the embedded store: `credentials`, id →
//! JSON; `credential_keys`, key hash → id; `audit`, sequence number → JSON
//! entry, trimmed from the oldest past `AUDIT_RETAIN`. Each write is one redb
//! transaction, so a credential and its key index always agree; none bumps
//! the policy revision.

use async_trait::async_trait;
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use super::video::open_read;
use super::{EmbeddedStore, db_err, decode, encode};
use crate::domain::access::{AuditEntry, AuditFilter, AuditPage, Credential};
use crate::store::access::{AUDIT_RETAIN, AUDIT_SCAN, AccessStore, audit_page};
use crate::store::{Result, StoreError};

const CREDENTIALS: TableDefinition<&str, &[u8]> = TableDefinition::new("credentials");
const CREDENTIAL_KEYS: TableDefinition<&str, &str> = TableDefinition::new("credential_keys");
const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

#[async_trait]
impl AccessStore for EmbeddedStore {
    async fn create_credential(&self, credential: &Credential) -> Result<()> {
        let credential = credential.clone();
        self.write(move |txn| {
            let mut credentials = txn.open_table(CREDENTIALS).map_err(db_err)?;
            let mut keys = txn.open_table(CREDENTIAL_KEYS).map_err(db_err)?;
            if credentials.get(credential.id.as_str()).map_err(db_err)?.is_some() {
                return Err(StoreError::CredentialExists { id: credential.id });
            }
            if keys.get(credential.key_hash.as_str()).map_err(db_err)?.is_some() {
                return Err(StoreError::KeyTaken);
            }
            credentials.insert(credential.id.as_str(), encode(&credential)?.as_slice()).map_err(db_err)?;
            keys.insert(credential.key_hash.as_str(), credential.id.as_str()).map_err(db_err)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn get_credential(&self, id: &str) -> Result<Option<Credential>> {
        let id = id.to_owned();
        self.read(move |txn| {
            let Some(credentials) = open_read(txn, CREDENTIALS)? else { return Ok(None) };
            let json = credentials.get(id.as_str()).map_err(db_err)?;
            json.map(|json| decode(json.value())).transpose()
        })
        .await
    }

    async fn credential_by_key(&self, key_hash: &str) -> Result<Option<Credential>> {
        let key_hash = key_hash.to_owned();
        self.read(move |txn| {
            let (Some(keys), Some(credentials)) = (open_read(txn, CREDENTIAL_KEYS)?, open_read(txn, CREDENTIALS)?)
            else {
                return Ok(None);
            };
            let Some(id) = keys.get(key_hash.as_str()).map_err(db_err)? else { return Ok(None) };
            let json = credentials.get(id.value()).map_err(db_err)?;
            json.map(|json| decode(json.value())).transpose()
        })
        .await
    }

    async fn list_credentials(&self) -> Result<Vec<Credential>> {
        self.read(|txn| {
            let Some(credentials) = open_read(txn, CREDENTIALS)? else { return Ok(Vec::new()) };
            let mut out = Vec::new();
            for entry in credentials.iter().map_err(db_err)? {
                let (_, json) = entry.map_err(db_err)?;
                out.push(decode(json.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn rekey_credential(&self, id: &str, key_hash: &str, key_prefix: &str, at: i64) -> Result<Credential> {
        let (id, key_hash, key_prefix) = (id.to_owned(), key_hash.to_owned(), key_prefix.to_owned());
        let (credential, _) = self
            .write(move |txn| {
                let mut credentials = txn.open_table(CREDENTIALS).map_err(db_err)?;
                let mut keys = txn.open_table(CREDENTIAL_KEYS).map_err(db_err)?;
                let stored: Option<Credential> =
                    credentials.get(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(mut credential) = stored else { return Err(StoreError::NoCredential { id }) };
                if keys.get(key_hash.as_str()).map_err(db_err)?.is_some() {
                    return Err(StoreError::KeyTaken);
                }
                keys.remove(credential.key_hash.as_str()).map_err(db_err)?;
                keys.insert(key_hash.as_str(), id.as_str()).map_err(db_err)?;
                credential.key_hash = key_hash;
                credential.key_prefix = key_prefix;
                credential.rotated_at = at;
                credentials.insert(id.as_str(), encode(&credential)?.as_slice()).map_err(db_err)?;
                Ok((credential, vec![]))
            })
            .await?;
        Ok(credential)
    }

    async fn delete_credential(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.write(move |txn| {
            let mut credentials = txn.open_table(CREDENTIALS).map_err(db_err)?;
            let mut keys = txn.open_table(CREDENTIAL_KEYS).map_err(db_err)?;
            let removed: Option<Credential> =
                credentials.remove(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            let Some(credential) = removed else { return Err(StoreError::NoCredential { id }) };
            keys.remove(credential.key_hash.as_str()).map_err(db_err)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn touch_credential(&self, id: &str, at: i64) -> Result<()> {
        let id = id.to_owned();
        self.write(move |txn| {
            let mut credentials = txn.open_table(CREDENTIALS).map_err(db_err)?;
            let stored: Option<Credential> =
                credentials.get(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            if let Some(mut credential) = stored {
                credential.last_used_at = credential.last_used_at.max(at);
                credentials.insert(id.as_str(), encode(&credential)?.as_slice()).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<u64> {
        let mut entry = entry.clone();
        let (seq, _) = self
            .write(move |txn| {
                let mut audit = txn.open_table(AUDIT).map_err(db_err)?;
                let last = audit.last().map_err(db_err)?.map(|(seq, _)| seq.value());
                entry.seq = last.unwrap_or(0) + 1;
                audit.insert(entry.seq, encode(&entry)?.as_slice()).map_err(db_err)?;
                let mut len = audit.len().map_err(db_err)?;
                while len > AUDIT_RETAIN {
                    if audit.pop_first().map_err(db_err)?.is_none() {
                        break;
                    }
                    len -= 1;
                }
                Ok((entry.seq, vec![]))
            })
            .await?;
        Ok(seq)
    }

    async fn list_audit(&self, filter: &AuditFilter) -> Result<AuditPage> {
        let filter = filter.clone();
        let before = filter.before()?;
        self.read(move |txn| {
            let Some(audit) = open_read(txn, AUDIT)? else { return Ok(AuditPage::default()) };
            let range = match before {
                Some(before) => audit.range(..before).map_err(db_err)?,
                None => audit.range(0..).map_err(db_err)?,
            };
            let (limit, mut matched) = (filter.limit(), 0);
            let mut entries = Vec::new();
            let mut more = false;
            for entry in range.rev() {
                if matched == limit || entries.len() == AUDIT_SCAN {
                    more = true;
                    break;
                }
                let (_, json) = entry.map_err(db_err)?;
                let entry: AuditEntry = decode(json.value())?;
                matched += usize::from(filter.matches(&entry));
                entries.push(entry);
            }
            Ok(audit_page(&filter, entries, more))
        })
        .await
    }
}
