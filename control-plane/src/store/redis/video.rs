//! Video tasks and locks on Redis.
//!
//! Layout, in the `{gw:video}` slot: `{gw:video}:video`, a hash id → JSON
//! of the task; `{gw:video}:video_time` and `{gw:video}:video_acct:<account>`,
//! sorted sets of ids by creation second (for listing newest first);
//! `{gw:video}:video_open`, the sorted set of open tasks by creation second
//! (for the poller). Locks are `gw:lock:<name>`, a string holding the
//! holder, with a TTL, each a key of its own. Creation and compare-and-set are Lua scripts, so the
//! hash and the sets always agree.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::{AsyncCommands as _, Script, Value};

use super::layout::{
    VIDEOS, VIDEOS_BY_TIME as BY_TIME, VIDEOS_OPEN as OPEN, lock_key, videos_of_account as account_key,
};
use super::{RedisStore, decode};
use crate::domain::VideoTask;
use crate::store::video::{self, VideoFilter, VideoStore, VideoWrite};
use crate::store::{Result, StoreError};

/// Ids fetched per page while filtering a listing.
const PAGE: isize = 200;

/// Keys 1 `{gw:video}:video`, 2 `{gw:video}:video_time`, 3 `{gw:video}:video_acct:<account>`,
/// 4 `{gw:video}:video_open`; args 1 id, 2 JSON, 3 score, 4 open (1 or 0).
const CREATE: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
if ARGV[4] == '1' then redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1]) end
return 1
";

/// Keys 1 `{gw:video}:video`, 2 `{gw:video}:video_open`; args 1 id, 2 expected version,
/// 3 new JSON, 4 new status, 5 open (1 or 0), 6 score. Returns `{0}` for a
/// missing task, `{1, stored}` for a refused write, `{2}` when written.
const UPDATE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return {0} end
local task = cjson.decode(stored)
if tonumber(task.version) ~= tonumber(ARGV[2]) then return {1, stored} end
if (task.status == 'completed' or task.status == 'failed') and task.status ~= ARGV[4] then return {1, stored} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return {2}
";

/// Key 1 the lock; args 1 holder, 2 TTL in ms.
const LOCK: &str = r"
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
";

/// The scripts, hashed once; sent with EVALSHA, loaded on the first NOSCRIPT.
static SCRIPTS: LazyLock<[Script; 4]> =
    LazyLock::new(|| [Script::new(CREATE), Script::new(UPDATE), Script::new(LOCK), Script::new(UNLOCK)]);

#[async_trait]
impl VideoStore for RedisStore {
    async fn create_video(&self, task: &VideoTask) -> Result<bool> {
        let json = serde_json::to_string(task).map_err(StoreError::Corrupt)?;
        let created: i64 = SCRIPTS[0]
            .key(VIDEOS)
            .key(BY_TIME)
            .key(account_key(&task.account_id))
            .key(OPEN)
            .arg(&task.id)
            .arg(json)
            .arg(task.created_at)
            .arg(u8::from(task.is_open()))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(created == 1)
    }

    async fn get_video(&self, id: &str) -> Result<Option<VideoTask>> {
        let json: Option<String> = self.conn.clone().hget(VIDEOS, id).await.map_err(StoreError::Redis)?;
        json.map(|json| decode(&json)).transpose()
    }

    async fn update_video(&self, task: &VideoTask) -> Result<VideoWrite> {
        let mut next = task.clone();
        next.version = task.version + 1;
        let json = serde_json::to_string(&next).map_err(StoreError::Corrupt)?;
        let reply: Vec<Value> = SCRIPTS[1]
            .key(VIDEOS)
            .key(OPEN)
            .arg(&task.id)
            .arg(task.version)
            .arg(json)
            .arg(task.status.as_str())
            .arg(u8::from(next.is_open()))
            .arg(task.created_at)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut reply = reply.into_iter();
        match super::take::<i64>(&mut reply)? {
            0 => Ok(VideoWrite::Conflict(None)),
            2 => Ok(VideoWrite::Written(next)),
            _ => {
                let stored: String = super::take(&mut reply)?;
                Ok(VideoWrite::Conflict(Some(decode(&stored)?)))
            }
        }
    }

    async fn list_videos(&self, filter: &VideoFilter) -> Result<Vec<VideoTask>> {
        let limit = video::limit(filter);
        let index = if filter.account_id.is_empty() { BY_TIME.to_owned() } else { account_key(&filter.account_id) };
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        let mut start: isize = 0;
        while out.len() < limit {
            let ids: Vec<String> = conn.zrevrange(&index, start, start + PAGE - 1).await.map_err(StoreError::Redis)?;
            if ids.is_empty() {
                break;
            }
            for task in self.tasks(&ids).await? {
                if video::matches(filter, &task) {
                    out.push(task);
                    if out.len() == limit {
                        break;
                    }
                }
            }
            start += PAGE;
        }
        Ok(out)
    }

    async fn open_videos(&self, limit: usize) -> Result<Vec<VideoTask>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let stop = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let ids: Vec<String> = self.conn.clone().zrange(OPEN, 0, stop).await.map_err(StoreError::Redis)?;
        self.tasks(&ids).await
    }

    async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let held: i64 = SCRIPTS[2]
            .key(lock_key(name))
            .arg(holder)
            .arg(video::ttl_millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(held == 1)
    }

    async fn unlock(&self, name: &str, holder: &str) -> Result<()> {
        let _: i64 = SCRIPTS[3]
            .key(lock_key(name))
            .arg(holder)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(())
    }
}

// === impl RedisStore ===

impl RedisStore {
    /// The tasks of `ids` that exist, in the order of `ids`.
    async fn tasks(&self, ids: &[String]) -> Result<Vec<VideoTask>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let jsons: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(VIDEOS)
            .arg(ids)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        jsons.into_iter().flatten().map(|json| decode(&json)).collect()
    }
}
