//! Files and batches on Redis, in the `{gw:batch}` slot: `…:file` and
//! `…:batch`, hashes id → JSON; `…:file_acct:<account>` and
//! `…:batch_acct:<account>`, sorted sets of ids (all scored 0, so ordered by
//! id, which is by creation time) for listing newest first; `…:batch_open`,
//! the same of open batches, for the poller. Writes that touch a hash and
//! its sets are Lua scripts, so they always agree.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{AsyncCommands as _, Script, Value};

use super::layout::{BATCH_FILES, BATCHES, BATCHES_OPEN, batch_files_of_account, batches_of_account};
use super::{RedisStore, decode};
use crate::domain::{Batch, BatchFile};
use crate::store::batch::{self, BatchFilter, BatchStore, BatchWrite};
use crate::store::{Result, StoreError};

/// Keys 1 the hash, 2 the account's set, 3 the open set (or the account's
/// again); args 1 id, 2 JSON, 3 open (1 or 0).
const CREATE: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
if ARGV[3] == '1' then redis.call('ZADD', KEYS[3], 0, ARGV[1]) end
return 1
";

/// Keys 1 the batch hash, 2 the open set; args 1 id, 2 expected version,
/// 3 new JSON, 4 ended (1 or 0), 5 open (1 or 0). Returns `{0}` for a
/// missing batch, `{1, stored}` for a refused write, `{2}` when written.
const UPDATE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return {0} end
local batch = cjson.decode(stored)
if tonumber(batch.version) ~= tonumber(ARGV[2]) then return {1, stored} end
if batch.ended == true and ARGV[4] ~= '1' then return {1, stored} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[2], 0, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return {2}
";

/// Keys 1 the file hash, 2 the account's set; arg 1 id.
const DELETE: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
";

static SCRIPTS: LazyLock<[Script; 3]> =
    LazyLock::new(|| [Script::new(CREATE), Script::new(UPDATE), Script::new(DELETE)]);

#[async_trait]
impl BatchStore for RedisStore {
    async fn create_batch_file(&self, file: &BatchFile) -> Result<bool> {
        let json = serde_json::to_string(file).map_err(StoreError::Corrupt)?;
        let index = batch_files_of_account(&file.account_id);
        self.create(BATCH_FILES, &index, &index, &file.id, json, false).await
    }

    async fn get_batch_file(&self, id: &str) -> Result<Option<BatchFile>> {
        self.get(BATCH_FILES, id).await
    }

    async fn delete_batch_file(&self, id: &str) -> Result<bool> {
        let Some(file) = self.get_batch_file(id).await? else { return Ok(false) };
        let deleted: i64 = SCRIPTS[2]
            .key(BATCH_FILES)
            .key(batch_files_of_account(&file.account_id))
            .arg(id)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(deleted == 1)
    }

    async fn list_batch_files(&self, filter: &BatchFilter) -> Result<Vec<BatchFile>> {
        self.list(BATCH_FILES, &batch_files_of_account(&filter.account_id), filter).await
    }

    async fn create_batch(&self, batch: &Batch) -> Result<bool> {
        let json = serde_json::to_string(batch).map_err(StoreError::Corrupt)?;
        let index = batches_of_account(&batch.account_id);
        self.create(BATCHES, &index, BATCHES_OPEN, &batch.id, json, batch.is_open()).await
    }

    async fn get_batch(&self, id: &str) -> Result<Option<Batch>> {
        self.get(BATCHES, id).await
    }

    async fn update_batch(&self, batch: &Batch) -> Result<BatchWrite> {
        let mut next = batch.clone();
        next.version = batch.version + 1;
        let json = serde_json::to_string(&next).map_err(StoreError::Corrupt)?;
        let reply: Vec<Value> = SCRIPTS[1]
            .key(BATCHES)
            .key(BATCHES_OPEN)
            .arg(&batch.id)
            .arg(batch.version)
            .arg(json)
            .arg(u8::from(next.ended))
            .arg(u8::from(next.is_open()))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut reply = reply.into_iter();
        match super::take::<i64>(&mut reply)? {
            0 => Ok(BatchWrite::Conflict(None)),
            2 => Ok(BatchWrite::Written(next)),
            _ => {
                let stored: String = super::take(&mut reply)?;
                Ok(BatchWrite::Conflict(Some(decode(&stored)?)))
            }
        }
    }

    async fn list_batches(&self, filter: &BatchFilter) -> Result<Vec<Batch>> {
        self.list(BATCHES, &batches_of_account(&filter.account_id), filter).await
    }

    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let stop = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let ids: Vec<String> = self.conn.clone().zrange(BATCHES_OPEN, 0, stop).await.map_err(StoreError::Redis)?;
        self.records(BATCHES, &ids).await
    }
}

// === impl RedisStore ===

impl RedisStore {
    async fn create(&self, hash: &str, index: &str, open: &str, id: &str, json: String, is_open: bool) -> Result<bool> {
        let created: i64 = SCRIPTS[0]
            .key(hash)
            .key(index)
            .key(open)
            .arg(id)
            .arg(json)
            .arg(u8::from(is_open))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(created == 1)
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, hash: &str, id: &str) -> Result<Option<T>> {
        let json: Option<String> = self.conn.clone().hget(hash, id).await.map_err(StoreError::Redis)?;
        json.map(|json| decode(&json)).transpose()
    }

    /// A page by `filter`: an account's through its set (newest id first),
    /// every account's by sorting the hash's ids.
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        hash: &str,
        index: &str,
        filter: &BatchFilter,
    ) -> Result<Vec<T>> {
        let limit = batch::limit(filter);
        let mut conn = self.conn.clone();
        let ids: Vec<String> = if filter.account_id.is_empty() {
            let mut ids: Vec<String> = conn.hkeys(hash).await.map_err(StoreError::Redis)?;
            ids.retain(|id| filter.after.is_empty() || *id < filter.after);
            ids.sort_unstable_by(|a, b| b.cmp(a));
            ids.truncate(limit);
            ids
        } else {
            let max = if filter.after.is_empty() { "+".to_owned() } else { format!("({}", filter.after) };
            redis::cmd("ZREVRANGEBYLEX")
                .arg(index)
                .arg(max)
                .arg("-")
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(StoreError::Redis)?
        };
        self.records(hash, &ids).await
    }

    /// The records of `ids` that exist, in the order of `ids`.
    async fn records<T: serde::de::DeserializeOwned>(&self, hash: &str, ids: &[String]) -> Result<Vec<T>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let jsons: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(hash)
            .arg(ids)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        jsons.into_iter().flatten().map(|json| decode(&json)).collect()
    }
}
