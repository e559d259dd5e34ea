//! The lineage on Redis: the hash `{gw}:lineage` (in the slot of the
//! revision, whose loss it detects) with fields `id` and
//! `confirmed` ("1" or "0"). A Redis that lost its data has no such hash, and
//! the first replica to ask writes a new unconfirmed one.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use super::layout::LINEAGE;
use crate::store::lineage::{self, Eviction, Lineage, LineageStore, Persistence};
use crate::store::{Result, StoreError};

/// Key 1 `{gw}:lineage`; arg 1 an id to use when there is none. Returns
/// `{id, confirmed}`.
const READ_OR_CREATE: &str = r"
local id = redis.call('HGET', KEYS[1], 'id')
if not id then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'confirmed', '0')
  return {ARGV[1], '0'}
end
return {id, redis.call('HGET', KEYS[1], 'confirmed') or '0'}
";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ_OR_CREATE));

#[async_trait]
impl LineageStore for RedisStore {
    async fn lineage(&self) -> Result<Lineage> {
        let (id, confirmed): (String, String) = SCRIPT
            .key(LINEAGE)
            .arg(lineage::new_id())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(Lineage { id, confirmed: confirmed == "1" })
    }

    async fn confirm_lineage(&self) -> Result<Lineage> {
        let id = lineage::new_id();
        let _: () = redis::cmd("HSET")
            .arg(LINEAGE)
            .arg("id")
            .arg(&id)
            .arg("confirmed")
            .arg("1")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(Lineage { id, confirmed: true })
    }

    /// On a cluster, the least durable of its primaries.
    async fn persistence(&self) -> Result<Persistence> {
        let mut conn = self.conn.clone();
        let mut setting = async |name: &str| -> Option<Vec<String>> {
            let replies: Vec<Vec<String>> =
                conn.on_every_primary(redis::cmd("CONFIG").arg("GET").arg(name)).await.ok()?;
            replies.into_iter().map(|reply| reply.into_iter().nth(1)).collect()
        };
        let (Some(appendonly), Some(save)) = (setting("appendonly").await, setting("save").await) else {
            return Ok(Persistence::Unknown);
        };
        if appendonly.len() != save.len() || appendonly.is_empty() {
            return Ok(Persistence::Unknown);
        }
        let each = appendonly.iter().zip(&save).map(|(appendonly, save)| Persistence::of_redis(appendonly, save));
        Ok(each.min_by_key(durability).unwrap_or(Persistence::Unknown))
    }

    /// On a cluster, the oldest primary's.
    async fn server_version(&self) -> Result<Option<(u32, u32)>> {
        let command = redis::cmd("INFO").arg("server").clone();
        let Ok(replies) = self.conn.clone().on_every_primary::<String>(&command).await else {
            return Ok(None);
        };
        let versions: Option<Vec<(u32, u32)>> = replies.iter().map(|info| lineage::redis_version(info)).collect();
        Ok(versions.and_then(|versions| versions.into_iter().min()))
    }

    /// On a cluster, any primary that evicts.
    async fn eviction(&self) -> Result<Eviction> {
        let command = redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").clone();
        let Ok(replies) = self.conn.clone().on_every_primary::<Vec<String>>(&command).await else {
            return Ok(Eviction::Unknown);
        };
        let mut policies = replies.into_iter().map(|reply| reply.into_iter().nth(1));
        match policies.try_fold(None, |evicts: Option<String>, policy| {
            let policy = policy?;
            Some(evicts.or((!policy.eq_ignore_ascii_case("noeviction")).then_some(policy)))
        }) {
            Some(Some(policy)) => Ok(Eviction::Evicts(policy)),
            Some(None) => Ok(Eviction::Never),
            None => Ok(Eviction::Unknown),
        }
    }
}

/// Orders the ways a Redis persists, least durable first.
fn durability(persistence: &Persistence) -> u8 {
    match persistence {
        Persistence::None | Persistence::Unknown => 0,
        Persistence::Rdb => 1,
        Persistence::Aof => 2,
        Persistence::AofAndRdb | Persistence::Durable => 3,
    }
}
