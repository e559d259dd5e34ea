//! In-flight slots on Redis: `gw:slots:<key>`, a hash holder →
//! `slots:expires_at`, changed only by one Lua script so that counting the
//! free slots and taking them are one step.

use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;

use super::RedisStore;
use super::layout::slots_key;
use crate::store::slots::{SlotAsk, SlotLease, SlotStore};
use crate::store::{Result, StoreError};

/// How long a slot hash outlives its newest lease.
const SLOTS_KEY_GRACE_SECS: i64 = 60;

/// Key 1 the slot hash. Args: 1 holder, 2 limit, 3 give back, 4 want,
/// 5 now, 6 TTL, 7 hash grace. Returns `{granted, held}`.
const LEASE_SLOTS: &str = r"
local now, ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local others, own = 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local n, expires = string.match(all[i + 1], '^(%d+):(-?%d+)$')
  n, expires = tonumber(n), tonumber(expires)
  if expires <= now then redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] == ARGV[1] then own = n
  else others = others + n end
end
own = math.max(own - tonumber(ARGV[3]), 0)
local granted = math.max(math.min(tonumber(ARGV[4]), tonumber(ARGV[2]) - others - own), 0)
own = own + granted
if own > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', own, now + ttl))
  local keep = ttl + tonumber(ARGV[7])
  if redis.call('TTL', KEYS[1]) < keep then redis.call('EXPIRE', KEYS[1], keep) end
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return {granted, own}
";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_SLOTS));

#[async_trait]
impl SlotStore for RedisStore {
    async fn lease_slots(&self, ask: &SlotAsk) -> Result<SlotLease> {
        let mut call = SCRIPT.prepare_invoke();
        call.key(slots_key(&ask.key));
        call.arg(&ask.holder).arg(ask.limit).arg(ask.give_back).arg(ask.want);
        call.arg(ask.now).arg(ask.ttl_secs).arg(SLOTS_KEY_GRACE_SECS);
        let (granted, held): (u32, u32) = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(SlotLease { granted, held })
    }
}
