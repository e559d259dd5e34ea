//! Credentials and the audit log on Redis.
//!
//! Layout: `{gw:cred}:cred`, a hash id → JSON of the credential (without its last
//! use); `{gw:cred}:cred_key`, a hash key hash → id; `{gw:cred}:cred_used`, a hash id →
//! Unix second of the last use; `{gw:audit}:audit`, a list of JSON entries, newest
//! first, trimmed to `AUDIT_RETAIN`; `{gw:audit}:audit_seq`, the last sequence
//! number. Writes are Lua scripts, so a credential and its key index always
//! agree and an entry's number and its place in the list are taken together
//! (the list holds consecutive numbers, newest at index 0).

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{AsyncCommands as _, Script};

use super::layout::{AUDIT, AUDIT_SEQ, CREDENTIAL_KEYS as KEYS, CREDENTIALS, CREDENTIALS_USED as USED};
use super::{RedisStore, decode};
use crate::domain::access::{AuditEntry, AuditFilter, AuditPage, Credential};
use crate::store::access::{AUDIT_RETAIN, AUDIT_SCAN, AccessStore, audit_page};
use crate::store::{Result, StoreError};

/// Audit entries fetched per `LRANGE` while filtering.
const AUDIT_PAGE: usize = 500;
/// Compare-and-set attempts of one rekey.
const REKEY_ATTEMPTS: u32 = 16;

/// Keys 1 `{gw:cred}:cred`, 2 `{gw:cred}:cred_key`; args 1 id, 2 key hash, 3 JSON.
/// Returns 0 for a taken id, -1 for a taken key, 1 when stored.
const CREATE: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
";

/// Keys 1 `{gw:cred}:cred`, 2 `{gw:cred}:cred_key`; args 1 id, 2 the JSON read, 3 old
/// hash, 4 new hash, 5 new JSON. Returns 0 for a missing credential, 2 when
/// it changed meanwhile, -1 for a taken key, 1 when written.
const REKEY: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return 0 end
if stored ~= ARGV[2] then return 2 end
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 1 then return -1 end
redis.call('HDEL', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[4], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
return 1
";

/// Keys 1 `{gw:cred}:cred`, 2 `{gw:cred}:cred_key`, 3 `{gw:cred}:cred_used`; arg 1 id.
/// Returns 0 for a missing credential, 1 when deleted.
const DELETE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return 0 end
local hash = cjson.decode(stored).key_hash
if type(hash) == 'string' and redis.call('HGET', KEYS[2], hash) == ARGV[1] then redis.call('HDEL', KEYS[2], hash) end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
";

/// Keys 1 `{gw:cred}:cred`, 2 `{gw:cred}:cred_used`; args 1 id, 2 Unix second.
const TOUCH: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > last then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return 1
";

/// Keys 1 `{gw:audit}:audit_seq`, 2 `{gw:audit}:audit`; args 1 the entry's JSON with the
/// placeholder sequence number 0, 2 the retention. Returns the number.
const APPEND: &str = r#"
local seq = redis.call('INCR', KEYS[1])
local json = string.gsub(ARGV[1], '^{"seq":0,', '{"seq":' .. seq .. ',', 1)
redis.call('LPUSH', KEYS[2], json)
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)
return seq
"#;

/// The scripts, hashed once; sent with EVALSHA, loaded on the first NOSCRIPT.
static SCRIPTS: LazyLock<[Script; 5]> = LazyLock::new(|| {
    [Script::new(CREATE), Script::new(REKEY), Script::new(DELETE), Script::new(TOUCH), Script::new(APPEND)]
});

#[async_trait]
impl AccessStore for RedisStore {
    async fn create_credential(&self, credential: &Credential) -> Result<()> {
        let mut stored = credential.clone();
        stored.last_used_at = 0;
        let json = serde_json::to_string(&stored).map_err(StoreError::Corrupt)?;
        let created: i64 = SCRIPTS[0]
            .key(CREDENTIALS)
            .key(KEYS)
            .arg(&credential.id)
            .arg(&credential.key_hash)
            .arg(json)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        match created {
            1 => Ok(()),
            0 => Err(StoreError::CredentialExists { id: credential.id.clone() }),
            _ => Err(StoreError::KeyTaken),
        }
    }

    async fn get_credential(&self, id: &str) -> Result<Option<Credential>> {
        let (json, used): (Option<String>, Option<i64>) = redis::pipe()
            .hget(CREDENTIALS, id)
            .hget(USED, id)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        json.map(|json| with_use(&json, used)).transpose()
    }

    async fn credential_by_key(&self, key_hash: &str) -> Result<Option<Credential>> {
        let id: Option<String> = self.conn.clone().hget(KEYS, key_hash).await.map_err(StoreError::Redis)?;
        match id {
            Some(id) => self.get_credential(&id).await,
            None => Ok(None),
        }
    }

    async fn list_credentials(&self) -> Result<Vec<Credential>> {
        let (all, used): (HashMap<String, String>, HashMap<String, i64>) = redis::pipe()
            .hgetall(CREDENTIALS)
            .hgetall(USED)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut out: Vec<Credential> =
            all.iter().map(|(id, json)| with_use(json, used.get(id).copied())).collect::<Result<_>>()?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn rekey_credential(&self, id: &str, key_hash: &str, key_prefix: &str, at: i64) -> Result<Credential> {
        let mut conn = self.conn.clone();
        for _ in 0..REKEY_ATTEMPTS {
            let read: Option<String> = conn.hget(CREDENTIALS, id).await.map_err(StoreError::Redis)?;
            let Some(read) = read else { return Err(StoreError::NoCredential { id: id.to_owned() }) };
            let mut credential: Credential = decode(&read)?;
            let old_hash = std::mem::replace(&mut credential.key_hash, key_hash.to_owned());
            key_prefix.clone_into(&mut credential.key_prefix);
            credential.rotated_at = at;
            let json = serde_json::to_string(&credential).map_err(StoreError::Corrupt)?;
            let done: i64 = SCRIPTS[1]
                .key(CREDENTIALS)
                .key(KEYS)
                .arg(id)
                .arg(&read)
                .arg(old_hash)
                .arg(key_hash)
                .arg(json)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::Redis)?;
            match done {
                0 => return Err(StoreError::NoCredential { id: id.to_owned() }),
                -1 => return Err(StoreError::KeyTaken),
                1 => {
                    let used: Option<i64> = conn.hget(USED, id).await.map_err(StoreError::Redis)?;
                    credential.last_used_at = used.unwrap_or(0);
                    return Ok(credential);
                }
                _ => {}
            }
        }
        Err(StoreError::Rejected { reason: format!("credential {id:?} kept changing concurrently; try again") })
    }

    async fn delete_credential(&self, id: &str) -> Result<()> {
        let deleted: i64 = SCRIPTS[2]
            .key(CREDENTIALS)
            .key(KEYS)
            .key(USED)
            .arg(id)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        if deleted == 1 { Ok(()) } else { Err(StoreError::NoCredential { id: id.to_owned() }) }
    }

    async fn touch_credential(&self, id: &str, at: i64) -> Result<()> {
        let _: i64 = SCRIPTS[3]
            .key(CREDENTIALS)
            .key(USED)
            .arg(id)
            .arg(at)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(())
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<u64> {
        let mut entry = entry.clone();
        // `seq` is the struct's first field: the script puts the number in.
        entry.seq = 0;
        let json = serde_json::to_string(&entry).map_err(StoreError::Corrupt)?;
        SCRIPTS[4]
            .key(AUDIT_SEQ)
            .key(AUDIT)
            .arg(json)
            .arg(AUDIT_RETAIN)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)
    }

    async fn list_audit(&self, filter: &AuditFilter) -> Result<AuditPage> {
        let before = filter.before()?;
        let mut conn = self.conn.clone();
        // Index i of the list holds number `newest - i`, so a cursor maps to
        // an index; entries pushed meanwhile only move older ones further
        // down, and the `seq` check skips what the cursor already passed.
        let mut start = match before {
            None => 0,
            Some(before) => {
                let newest: Option<String> = conn.lindex(AUDIT, 0).await.map_err(StoreError::Redis)?;
                let newest = newest.map(|json| decode::<AuditEntry>(&json)).transpose()?.map_or(0, |e| e.seq);
                usize::try_from((newest + 1).saturating_sub(before)).unwrap_or(usize::MAX)
            }
        };
        let (limit, mut matched) = (filter.limit(), 0);
        let mut entries = Vec::new();
        let mut more = false;
        loop {
            let stop = start + AUDIT_PAGE - 1;
            let jsons: Vec<String> =
                conn.lrange(AUDIT, start as isize, stop as isize).await.map_err(StoreError::Redis)?;
            let fetched = jsons.len();
            for json in jsons {
                let entry: AuditEntry = decode(&json)?;
                if before.is_none_or(|before| entry.seq < before) {
                    matched += usize::from(filter.matches(&entry));
                    entries.push(entry);
                }
            }
            if fetched < AUDIT_PAGE {
                break;
            }
            if matched >= limit || entries.len() >= AUDIT_SCAN {
                more = true;
                break;
            }
            start += AUDIT_PAGE;
        }
        Ok(audit_page(filter, entries, more))
    }
}

/// A credential from its stored JSON and last use.
fn with_use(json: &str, used: Option<i64>) -> Result<Credential> {
    let mut credential: Credential = decode(json)?;
    credential.last_used_at = used.unwrap_or(0);
    Ok(credential)
}
