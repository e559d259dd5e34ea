//! Files and batches in the embedded store: `batch_files` and `batches`, id
//! → JSON; `batch_files_acct` and `batches_acct`, `(account, id)` for
//! listing an account's newest first; `batches_open`, ids of open batches.
//! Each write is one redb transaction; none bumps the policy revision.

use async_trait::async_trait;
use redb::{ReadTransaction, ReadableTable, TableDefinition};

use super::video::open_read;
use super::{EmbeddedStore, db_err, decode, encode};
use crate::domain::{Batch, BatchFile};
use crate::store::Result;
use crate::store::batch::{self, BatchFilter, BatchStore, BatchWrite};

const FILES: TableDefinition<&str, &[u8]> = TableDefinition::new("batch_files");
const FILES_ACCT: TableDefinition<(&str, &str), ()> = TableDefinition::new("batch_files_acct");
const BATCHES: TableDefinition<&str, &[u8]> = TableDefinition::new("batches");
const BATCHES_ACCT: TableDefinition<(&str, &str), ()> = TableDefinition::new("batches_acct");
const OPEN: TableDefinition<&str, ()> = TableDefinition::new("batches_open");

#[async_trait]
impl BatchStore for EmbeddedStore {
    async fn create_batch_file(&self, file: &BatchFile) -> Result<bool> {
        let file = file.clone();
        let (created, _) = self
            .write(move |txn| {
                let mut files = txn.open_table(FILES).map_err(db_err)?;
                if files.get(file.id.as_str()).map_err(db_err)?.is_some() {
                    return Ok((false, vec![]));
                }
                files.insert(file.id.as_str(), encode(&file)?.as_slice()).map_err(db_err)?;
                let mut by_account = txn.open_table(FILES_ACCT).map_err(db_err)?;
                by_account.insert((file.account_id.as_str(), file.id.as_str()), ()).map_err(db_err)?;
                Ok((true, vec![]))
            })
            .await?;
        Ok(created)
    }

    async fn get_batch_file(&self, id: &str) -> Result<Option<BatchFile>> {
        let id = id.to_owned();
        self.read(move |txn| get(txn, FILES, &id)).await
    }

    async fn delete_batch_file(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        let (deleted, _) = self
            .write(move |txn| {
                let mut files = txn.open_table(FILES).map_err(db_err)?;
                let stored: Option<BatchFile> =
                    files.remove(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(stored) = stored else { return Ok((false, vec![])) };
                let mut by_account = txn.open_table(FILES_ACCT).map_err(db_err)?;
                by_account.remove((stored.account_id.as_str(), stored.id.as_str())).map_err(db_err)?;
                Ok((true, vec![]))
            })
            .await?;
        Ok(deleted)
    }

    async fn list_batch_files(&self, filter: &BatchFilter) -> Result<Vec<BatchFile>> {
        let filter = filter.clone();
        self.read(move |txn| list(txn, FILES, FILES_ACCT, &filter)).await
    }

    async fn create_batch(&self, batch: &Batch) -> Result<bool> {
        let batch = batch.clone();
        let (created, _) = self
            .write(move |txn| {
                let mut batches = txn.open_table(BATCHES).map_err(db_err)?;
                if batches.get(batch.id.as_str()).map_err(db_err)?.is_some() {
                    return Ok((false, vec![]));
                }
                batches.insert(batch.id.as_str(), encode(&batch)?.as_slice()).map_err(db_err)?;
                let mut by_account = txn.open_table(BATCHES_ACCT).map_err(db_err)?;
                by_account.insert((batch.account_id.as_str(), batch.id.as_str()), ()).map_err(db_err)?;
                if batch.is_open() {
                    txn.open_table(OPEN).map_err(db_err)?.insert(batch.id.as_str(), ()).map_err(db_err)?;
                }
                Ok((true, vec![]))
            })
            .await?;
        Ok(created)
    }

    async fn get_batch(&self, id: &str) -> Result<Option<Batch>> {
        let id = id.to_owned();
        self.read(move |txn| get(txn, BATCHES, &id)).await
    }

    async fn update_batch(&self, batch: &Batch) -> Result<BatchWrite> {
        let batch = batch.clone();
        let (outcome, _) = self
            .write(move |txn| {
                let mut batches = txn.open_table(BATCHES).map_err(db_err)?;
                let stored: Option<Batch> =
                    batches.get(batch.id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(stored) = stored else { return Ok((BatchWrite::Conflict(None), vec![])) };
                if stored.version != batch.version || !batch::allowed(&stored, &batch) {
                    return Ok((BatchWrite::Conflict(Some(stored)), vec![]));
                }
                let mut next = batch;
                next.version += 1;
                batches.insert(next.id.as_str(), encode(&next)?.as_slice()).map_err(db_err)?;
                let mut open = txn.open_table(OPEN).map_err(db_err)?;
                if next.is_open() {
                    open.insert(next.id.as_str(), ()).map_err(db_err)?;
                } else {
                    open.remove(next.id.as_str()).map_err(db_err)?;
                }
                Ok((BatchWrite::Written(next), vec![]))
            })
            .await?;
        Ok(outcome)
    }

    async fn list_batches(&self, filter: &BatchFilter) -> Result<Vec<Batch>> {
        let filter = filter.clone();
        self.read(move |txn| list(txn, BATCHES, BATCHES_ACCT, &filter)).await
    }

    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>> {
        self.read(move |txn| {
            let (Some(open), Some(batches)) = (open_read(txn, OPEN)?, open_read(txn, BATCHES)?) else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            for entry in open.iter().map_err(db_err)?.take(limit) {
                let (id, _) = entry.map_err(db_err)?;
                if let Some(json) = batches.get(id.value()).map_err(db_err)? {
                    out.push(decode(json.value())?);
                }
            }
            Ok(out)
        })
        .await
    }
}

fn get<T: serde::de::DeserializeOwned>(
    txn: &ReadTransaction,
    table: TableDefinition<&str, &[u8]>,
    id: &str,
) -> Result<Option<T>> {
    let Some(records) = open_read(txn, table)? else { return Ok(None) };
    let json = records.get(id).map_err(db_err)?;
    json.map(|json| decode(json.value())).transpose()
}

/// A page of `records` by `filter`, newest id first, through the account
/// index (or all records when the filter names no account).
fn list<T: serde::de::DeserializeOwned>(
    txn: &ReadTransaction,
    records: TableDefinition<&str, &[u8]>,
    by_account: TableDefinition<(&str, &str), ()>,
    filter: &BatchFilter,
) -> Result<Vec<T>> {
    let limit = batch::limit(filter);
    let Some(records) = open_read(txn, records)? else { return Ok(Vec::new()) };
    let mut ids = Vec::new();
    if filter.account_id.is_empty() {
        for entry in records.iter().map_err(db_err)?.rev() {
            let (id, _) = entry.map_err(db_err)?;
            let id = id.value().to_owned();
            if filter.after.is_empty() || id < filter.after {
                ids.push(id);
            }
            if ids.len() == limit {
                break;
            }
        }
    } else if let Some(index) = open_read(txn, by_account)? {
        let account = filter.account_id.as_str();
        // Ids are ASCII letters, digits, `-` and `_`: all sort before `~`.
        let upper = if filter.after.is_empty() { "~" } else { filter.after.as_str() };
        for entry in index.range((account, "")..(account, upper)).map_err(db_err)?.rev() {
            let (key, _) = entry.map_err(db_err)?;
            ids.push(key.value().1.to_owned());
            if ids.len() == limit {
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(json) = records.get(id.as_str()).map_err(db_err)? {
            out.push(decode(json.value())?);
        }
    }
    Ok(out)
}
