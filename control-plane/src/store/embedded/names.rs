//! What must stay unique across resources, checked inside the write
//! transaction that could break it: account and channel names per kind,
//! and token key hashes (an index hash → token id, built once for files
//! written before it existed).

use redb::{ReadableTable as _, TableDefinition, WriteTransaction};

use super::{META, TOKEN_KEYS_BUILT, db_err, meta_get, resources};
use crate::domain::Kind;
use crate::store::codec::parse_resource;
use crate::store::{Result, StoreError, token_key, unique_name};

/// Token key hash → token id: one key opens at most one token.
const TOKEN_KEYS: TableDefinition<&str, &str> = TableDefinition::new("token_keys");

/// `NameTaken` when a resource of `table` other than `id` is named `name`.
/// Reads the whole table: it runs inside the write transaction, so no
/// other write can come between the check and the write.
pub(super) fn check_name_free(
    table: &redb::Table<'_, &'static str, &'static [u8]>,
    kind: Kind,
    name: &str,
    id: &str,
) -> Result<()> {
    for entry in table.iter().map_err(db_err)? {
        let (other, json) = entry.map_err(db_err)?;
        if other.value() != id && unique_name(&parse_resource(kind, json.value())?) == Some(name) {
            return Err(StoreError::NameTaken { kind, name: name.to_owned(), owner: Some(other.value().to_owned()) });
        }
    }
    Ok(())
}

/// Points key hash `hash` at token `id`; `TokenKeyTaken` when another
/// stored token (of `tokens`) holds it. Runs inside the write transaction.
pub(super) fn claim_token_key(
    txn: &WriteTransaction,
    tokens: &redb::Table<'_, &'static str, &'static [u8]>,
    hash: &str,
    id: &str,
) -> Result<()> {
    let mut keys = txn.open_table(TOKEN_KEYS).map_err(db_err)?;
    let owner = keys.get(hash).map_err(db_err)?.map(|owner| owner.value().to_owned());
    if let Some(owner) = owner.filter(|owner| owner != id)
        && tokens.get(owner.as_str()).map_err(db_err)?.is_some()
    {
        return Err(StoreError::TokenKeyTaken { owner });
    }
    keys.insert(hash, id).map_err(db_err)?;
    Ok(())
}

/// Forgets key hash `hash` if it points at token `id`.
pub(super) fn release_token_key(txn: &WriteTransaction, hash: &str, id: &str) -> Result<()> {
    let mut keys = txn.open_table(TOKEN_KEYS).map_err(db_err)?;
    let owned = keys.get(hash).map_err(db_err)?.is_some_and(|owner| owner.value() == id);
    if owned {
        keys.remove(hash).map_err(db_err)?;
    }
    Ok(())
}

/// Builds `TOKEN_KEYS` from the stored tokens once, for files written
/// before it existed (the first of duplicate keys wins).
pub(super) fn index_token_keys(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).map_err(db_err)?;
    let mut keys = txn.open_table(TOKEN_KEYS).map_err(db_err)?;
    if meta_get(&meta, TOKEN_KEYS_BUILT)? == 1 {
        return Ok(());
    }
    let tokens = txn.open_table(resources(Kind::Token)).map_err(db_err)?;
    for entry in tokens.iter().map_err(db_err)? {
        let (id, json) = entry.map_err(db_err)?;
        let token = parse_resource(Kind::Token, json.value())?;
        if let Some(hash) = token_key(&token)
            && keys.get(hash).map_err(db_err)?.is_none()
        {
            keys.insert(hash, id.value()).map_err(db_err)?;
        }
    }
    meta.insert(TOKEN_KEYS_BUILT, 1).map_err(db_err)?;
    Ok(())
}
