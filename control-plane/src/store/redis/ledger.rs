//! Usage records and spending leases on Redis.
//!
//! Layout, all in the `{gw}` slot (see `layout` for why): `{gw}:usage`, a
//! list of JSON records, newest applied first;
//! `{gw}:applied_hour:<start>:set`, the idempotency markers of the records
//! made in one hour, a set of request ids that never expires
//! (`rollup::prune` removes it with the rows it guards), listed in
//! `{gw}:applied_hours` (earlier versions kept them in a hash
//! `{gw}:applied_hour:<start>`, still read and pruned);
//! `{gw}:hold:<budget>`, a hash holder →
//! `amount:expires_at` of the leases of one budget;
//! `{gw}:rollup:<hour|day>:<bucket start>`, one hash per rollup bucket (see
//! `rollup`); `{gw}:win:<budget>:<bucket>`, the spend of a window budget's
//! bucket (see `calendar`), expiring a day past the last window counting
//! it. Applying records, leasing, releasing and charging are each one
//! Lua script, so checking what is available and taking it are one step, and
//! a record, its counters and its rollups are written together or not at
//! all. None of them bumps the revision: spending is not policy.

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use redis::Script;

use super::layout::{
    ACCOUNT_USED, APPLIED_BUCKETS, BALANCE, NO_WINDOW, TOKEN_USED, USAGE, USAGE_OPEN, hold_key, kind_key, window_key,
};
use super::usage_batch::{self, RecordWindows, ScriptArgs};
use super::{RedisStore, malformed};
use crate::domain::{Kind, UsageOutcome, UsageRecord, WindowBudget};
use crate::store::budget::{Budget, BudgetStore, Charged, Lease, LeaseAsk};
use crate::store::{Result, StoreError};
/// Records per usage script. A script holds Redis, and on a shared host a
/// core, for its whole run, at 3–5 µs a record with a large keyspace on a
/// busy host: 100 keep a call near half a millisecond, so leases and other
/// callers never wait long behind a report, while the few dozen writes of
/// a batch's sums are shared by enough records. Against 500, a data plane
/// on the same two cores saw its p99 fall by about a quarter; the ledger's
/// records/s did not change (`bench/run`, docs/benchmark.md).
const USAGE_BATCH: usize = 100;
/// How long a hold hash outlives its newest lease.
const HOLD_KEY_GRACE_SECS: i64 = 60;

/// Just the window budget of a stored token or account.
#[derive(serde::Deserialize)]
struct Windowed {
    #[serde(default)]
    window: Option<WindowBudget>,
}

/// Helpers shared by the scripts below. Keys 1 `{gw}:account`, 2
/// `{gw}:token`, 3 `{gw}:balance`, 4 `{gw}:account_used`, 5
/// `{gw}:token_used`, 6 `{gw}:usage`.
const COMMON: &str = r"
local function parse_hold(value)
  local amount, expires = string.match(value, '^(-?%d+):(-?%d+)$')
  return tonumber(amount), tonumber(expires)
end
-- Live leases of a hold hash: (everyone else's sum, `holder`'s); drops lapsed ones.
local function holds(key, holder, now)
  local others, own = 0, 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local amount, expires = parse_hold(all[i + 1])
    if expires <= now then redis.call('HDEL', key, all[i])
    elseif all[i] == holder then own = amount
    else others = others + amount end
  end
  return others, own
end
local function take_hold(key, holder, cost)
  local value = redis.call('HGET', key, holder)
  if not value then return end
  local amount, expires = parse_hold(value)
  local left = amount - cost
  if left < 0 then left = 0 end
  redis.call('HSET', key, holder, string.format('%d:%d', left, expires))
end
-- What is left of a budget: found, unlimited, remaining (quota - used, or
-- balance), lowered to what is left of its window budget when it has one:
-- its quota less the window buckets KEYS[first .. first + count - 1].
local function standing(kind, id, first, count)
  local json
  if kind == 'token' then json = redis.call('HGET', KEYS[2], id) else json = redis.call('HGET', KEYS[1], id) end
  if not json then return false, false, 0 end
  local r = cjson.decode(json)
  local unlimited, remaining = r.unlimited == true, 0
  if not unlimited then
    if kind == 'token' then
      remaining = (r.quota_micros or 0) - tonumber(redis.call('HGET', KEYS[5], id) or '0')
    else
      remaining = tonumber(redis.call('HGET', KEYS[3], id) or '0')
    end
  end
  local w = r.window
  if count > 0 and type(w) == 'table' and w.period ~= 'none' then
    local spent = 0
    for i = first, first + count - 1 do spent = spent + tonumber(redis.call('GET', KEYS[i]) or '0') end
    local left = (w.quota_micros or 0) - spent
    if unlimited or left < remaining then remaining = left end
    unlimited = false
  end
  return true, unlimited, remaining
end
-- The positions (from 1, ascending) of the records of the batch whose
-- arguments start at ARGV[a] (see `apply_batch`) that were applied before:
-- marked in their hour's marker set or, by earlier versions, in its marker
-- hash or by a key of their own. Writes nothing. Also returns where the
-- batch's sums start.
local function batch_seen(k, a)
  local n = tonumber(ARGV[a])
  a = a + 2 + tonumber(ARGV[a + 1])
  local seen, any = {}, false
  local pos = 0
  for _ = 1, tonumber(ARGV[a]) do
    local m, hash = tonumber(ARGV[a + 3]), KEYS[tonumber(ARGV[a + 2])]
    local found = redis.call('SMISMEMBER', KEYS[tonumber(ARGV[a + 1])], unpack(ARGV, a + 4, a + 3 + m))
    for j = 1, m do
      if found[j] == 1 then
        seen[pos + j], any = true, true
      end
    end
    if redis.call('EXISTS', hash) == 1 then
      found = redis.call('HMGET', hash, unpack(ARGV, a + 4, a + 3 + m))
      for j = 1, m do
        if found[j] then
          seen[pos + j], any = true, true
        end
      end
    end
    pos = pos + m
    a = a + 3 + m
  end
  a = a + 1
  local legacy = tonumber(ARGV[a])
  for j = 1, legacy do
    if redis.call('EXISTS', KEYS[k + j - 1]) == 1 then
      seen[tonumber(ARGV[a + j])], any = true, true
    end
  end
  local list = {}
  if any then
    for i = 1, n do
      if seen[i] then list[#list + 1] = i end
    end
  end
  return list, a + 1 + legacy
end
-- Marks every record of the batch whose markers start at ARGV[a] in its
-- hour's marker set, none of them marked before. Returns the positions of
-- records whose request id came earlier in the same batch and hour (their
-- markers removed again, so nothing is written), or an empty table.
local function mark_batch(a)
  local runs, added, total = tonumber(ARGV[a]), 0, 0
  local at = a + 1
  for _ = 1, runs do
    local m = tonumber(ARGV[at + 2])
    added = added + redis.call('SADD', KEYS[tonumber(ARGV[at])], unpack(ARGV, at + 3, at + 2 + m))
    total = total + m
    at = at + 3 + m
  end
  if added == total then return {} end
  -- A request id twice in the batch: undo, then name the later ones.
  local firsts, seen, pos = {}, {}, 0
  at = a + 1
  for _ = 1, runs do
    local set, m = ARGV[at], tonumber(ARGV[at + 2])
    redis.call('SREM', KEYS[tonumber(set)], unpack(ARGV, at + 3, at + 2 + m))
    for j = 1, m do
      local mark = set .. ':' .. ARGV[at + 2 + j]
      if firsts[mark] then seen[#seen + 1] = pos + j else firsts[mark] = true end
    end
    pos = pos + m
    at = at + 3 + m
  end
  return seen
end
-- Applies the batch of records whose legacy idempotency markers are
-- KEYS[k ..] and whose arguments start at ARGV[a] (see `usage_batch`): its
-- size n, how many rows follow (n, or 0 when the caller pushes them to the
-- list itself, see `APPLY_USAGE`), each record's JSON; the runs of records
-- of one hour, each as (marker set key index, the earlier versions' marker
-- hash key index, length, then each record's request id); the records
-- that may hold a legacy marker (their count, then each one's position);
-- then what the batch adds up to: per account and per token
-- (id, cost, -cost, window bucket key index or 0, its expiry), per lease
-- (hold key index, holder, cost), per marker hour (its start),
-- per rollup bucket (key index, expiry, field count, then field and amount
-- each). ARGV[1] is the last usage index kept (-1: all); the marker hours
-- are listed in KEYS[7].
--
-- All or nothing: when a record's request id was seen before (or twice in
-- the batch), nothing is written; it returns the positions (from 1) of
-- those records, for the caller to send the batch again without them.
-- Returns an empty table when the whole batch was applied.
local function apply_batch(k, a)
  local rows = tonumber(ARGV[a + 1])
  local seen, sums = batch_seen(k, a)
  if #seen > 0 then return seen end
  seen = mark_batch(a + 2 + rows)
  if #seen > 0 then return seen end
  local records = a + 2
  a = sums
  -- Accounts: KEYS[1] their hash, KEYS[3] balance, KEYS[4] spent; then
  -- tokens: KEYS[2] their hash, KEYS[5] spent.
  for _, kind in ipairs({1, 2}) do
    local count = tonumber(ARGV[a])
    a = a + 1
    for _ = 1, count do
      local id, cost, w = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 3])
      if redis.call('HEXISTS', KEYS[kind], id) == 1 then
        if kind == 1 then
          redis.call('HINCRBY', KEYS[3], id, ARGV[a + 2])
          redis.call('HINCRBY', KEYS[4], id, cost)
        else
          redis.call('HINCRBY', KEYS[5], id, cost)
        end
        if w > 0 then
          redis.call('INCRBY', KEYS[w], cost)
          redis.call('EXPIREAT', KEYS[w], ARGV[a + 4])
        end
      end
      a = a + 5
    end
  end
  local count = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, count do
    take_hold(KEYS[tonumber(ARGV[a])], ARGV[a + 1], tonumber(ARGV[a + 2]))
    a = a + 3
  end
  count = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, count do
    redis.call('ZADD', KEYS[7], ARGV[a], ARGV[a])
    a = a + 1
  end
  count = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, count do
    local key, fields = KEYS[tonumber(ARGV[a])], tonumber(ARGV[a + 2])
    for f = 1, fields do
      redis.call('HINCRBY', key, ARGV[a + 1 + 2 * f], ARGV[a + 2 + 2 * f])
    end
    redis.call('EXPIREAT', key, ARGV[a + 1])
    a = a + 3 + 2 * fields
  end
  if rows > 0 then
    -- LPUSH of many values leaves them as one LPUSH each would.
    for i = records, records + rows - 1, 1000 do
      redis.call('LPUSH', KEYS[6], unpack(ARGV, i, math.min(i + 999, records + rows - 1)))
    end
    redis.call('LTRIM', KEYS[6], 0, ARGV[1])
  end
  return seen
end
";

/// Key 7 the list of marker hashes, 8 `USAGE_OPEN`, 9… the batch's (see
/// `apply_batch`). Args: 1 last usage index kept (-1: all), 2… the
/// batch's. Returns the positions of records applied before, having written
/// nothing; empty when all were applied.
///
/// A batch sent without its rows (see `RedisStore::apply_beside`) is
/// applied only when the usage list exists, which it then renames to
/// `USAGE_OPEN` for the commands after the script to push the rows to and
/// rename back; when the list does not exist it writes nothing and returns
/// `{-1}`, for the caller to send the rows as arguments.
const APPLY_USAGE: &str = r"
local beside = tonumber(ARGV[3]) == 0 and tonumber(ARGV[2]) > 0
if beside and redis.call('EXISTS', KEYS[6]) == 0 then return {-1} end
local seen = apply_batch(9, 2)
if beside and #seen == 0 then redis.call('RENAME', KEYS[6], KEYS[8]) end
return seen
";

/// Key 7 the hold hash, 8… the buckets of the budget's current window.
/// Args: 1 kind, 2 id, 3 holder, 4 need, 5 want, 6 now, 7 TTL, 8 hash
/// grace, 9 how many window buckets. Returns `{found, unlimited, remaining,
/// granted, held, available}`; the grant follows `budget::grant`.
const LEASE: &str = r"
local found, unlimited, remaining = standing(ARGV[1], ARGV[2], 8, tonumber(ARGV[9]))
if not found then return {0, 0, 0, 0, 0, 0} end
if unlimited then return {1, 1, 0, 0, 0, 0} end
local now, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
local others, own = holds(KEYS[7], ARGV[3], now)
local available = remaining - others - own
local need, want = tonumber(ARGV[4]), tonumber(ARGV[5])
local granted = 0
if need >= 0 and available >= need and available > 0 then
  granted = math.min(math.max(want, need), math.max(need, math.floor(available / 4)), available)
end
local held = own + granted
redis.call('HSET', KEYS[7], ARGV[3], string.format('%d:%d', held, now + ttl))
local keep = ttl + tonumber(ARGV[8])
if redis.call('TTL', KEYS[7]) < keep then redis.call('EXPIRE', KEYS[7], keep) end
return {1, 0, remaining, granted, held, available - granted}
";

/// Key 7 the hold hash. Args: 1 holder, 2 amount.
const RELEASE: &str = r"
take_hold(KEYS[7], ARGV[1], tonumber(ARGV[2]))
return 1
";

/// Key 7 the list of marker hashes, 8 the token's hold hash, 9 the
/// account's, 10… the buckets of the token's and then the account's
/// current window, then the record's batch of one (see `apply_batch`).
/// Args: 1 last usage index kept, 2 now, 3 token, 4 account, 5 cost, 6 and
/// 7 how many window buckets of the token and of the account, 8… the
/// batch's. Returns `{0}` applied, `{1}` duplicate, `{2}` token quota
/// short, `{3, balance}` balance short.
const CHARGE: &str = r"
local token_buckets, account_buckets = tonumber(ARGV[6]), tonumber(ARGV[7])
local marker = 10 + token_buckets + account_buckets
if #batch_seen(marker, 8) > 0 then return {1} end
local now, cost = tonumber(ARGV[2]), tonumber(ARGV[5])
local found, unlimited, remaining = standing('token', ARGV[3], 10, token_buckets)
if not found then return {2} end
if not unlimited then
  local others = holds(KEYS[8], '', now)
  if remaining - others < cost then return {2} end
end
found, unlimited, remaining = standing('account', ARGV[4], 10 + token_buckets, account_buckets)
if not found then return {3, 0} end
if not unlimited then
  local others = holds(KEYS[9], '', now)
  if remaining - others < cost then return {3, remaining} end
end
apply_batch(marker, 8)
return {0}
";

static SCRIPTS: LazyLock<[Script; 4]> =
    LazyLock::new(|| [APPLY_USAGE, LEASE, RELEASE, CHARGE].map(|body| Script::new(&format!("{COMMON}{body}"))));

fn kind_of(budget: &Budget) -> Kind {
    match budget {
        Budget::Token(_) => Kind::Token,
        Budget::Account(_) => Kind::Account,
    }
}

/// A script call with the six ledger keys in place (scripts that write
/// usage take the list of marker hashes as key 7).
fn invocation(script: &Script) -> redis::ScriptInvocation<'_> {
    let mut call = script.prepare_invoke();
    call.key(kind_key(Kind::Account)).key(kind_key(Kind::Token));
    call.key(BALANCE).key(ACCOUNT_USED).key(TOKEN_USED).key(USAGE);
    call
}

/// What `apply_beside` found.
enum Beside {
    /// The batch was applied but for the records at these positions (from
    /// 1), which were applied before (nothing was written then).
    Seen(Vec<usize>),
    /// There is no usage list to push to: nothing was written.
    NoList,
}

// === impl RedisStore ===

impl RedisStore {
    /// The last index of `{gw}:usage` the count cap keeps; -1 keeps all.
    fn last_usage_index(&self) -> i64 {
        match self.retention.usage_max_records {
            0 => -1,
            cap => i64::try_from(cap).unwrap_or(i64::MAX).saturating_sub(1),
        }
    }

    /// The window budgets of the tokens or accounts `ids` that have one, by
    /// id. Read before a script runs: a budget changed in between counts
    /// one more call in its old windows (changing a budget starts its
    /// windows afresh anyway).
    async fn windows_of(&self, kind: Kind, ids: &[&str]) -> Result<HashMap<String, WindowBudget>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let jsons: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(kind_key(kind))
            .arg(ids)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut windows = HashMap::new();
        for (id, json) in ids.iter().zip(jsons) {
            let Some(json) = json else { continue };
            let stored: Windowed = serde_json::from_str(&json).map_err(StoreError::Corrupt)?;
            if let Some(window) = stored.window.filter(WindowBudget::is_set) {
                windows.insert((*id).to_owned(), window);
            }
        }
        Ok(windows)
    }

    /// The buckets of the current window of `budget` at `now`, as keys;
    /// none when it has no window budget.
    async fn current_window_keys(&self, budget: &Budget, now: i64) -> Result<Vec<String>> {
        let windows = self.windows_of(kind_of(budget), &[budget.id()]).await?;
        Ok(match windows.get(budget.id()).map(|w| w.window_at(now)) {
            Some(Ok(window)) => window.buckets.iter().map(|b| window_key(budget, b)).collect(),
            // No window holds `now`: an empty bucket stands for it, so the
            // budget is still capped at its window quota.
            Some(Err(_)) => vec![NO_WINDOW.to_owned()],
            None => Vec::new(),
        })
    }

    /// The window buckets each of `records` counts in.
    async fn record_windows(&self, records: &[UsageRecord]) -> Result<Vec<RecordWindows>> {
        let mut tokens: Vec<&str> = records.iter().map(|r| r.token_id.as_str()).collect();
        let mut accounts: Vec<&str> = records.iter().map(|r| r.account_id.as_str()).collect();
        tokens.sort_unstable();
        tokens.dedup();
        accounts.sort_unstable();
        accounts.dedup();
        let tokens = self.windows_of(Kind::Token, &tokens).await?;
        let accounts = self.windows_of(Kind::Account, &accounts).await?;
        // The budget named only for a record that has a window (rarely).
        let bucket = |window: Option<&WindowBudget>, budget: fn(String) -> Budget, id: &str, at: i64| {
            let (bucket, expires) = window?.bucket_of(at).ok()?;
            Some((window_key(&budget(id.to_owned()), &bucket), expires))
        };
        Ok(records
            .iter()
            .map(|r| {
                [
                    bucket(tokens.get(&r.token_id), Budget::Token, &r.token_id, r.created_at),
                    bucket(accounts.get(&r.account_id), Budget::Account, &r.account_id, r.created_at),
                ]
            })
            .collect())
    }

    /// `Store::apply_usage` on Redis, in batches of `USAGE_BATCH`, one after
    /// the other (the window budgets read once for all). A batch holding
    /// records applied before is written without them, in a second call.
    /// A batch's rows are pushed beside the script (`apply_beside`), or
    /// passed to it when there is no usage list yet.
    pub(super) async fn apply_usage_records(&self, records: &[UsageRecord]) -> Result<UsageOutcome> {
        let mut outcome = UsageOutcome::default();
        let windows = self.record_windows(records).await?;
        for (batch, windows) in records.chunks(USAGE_BATCH).zip(windows.chunks(USAGE_BATCH)) {
            let mut pending: Vec<usize> = (0..batch.len()).collect();
            let mut beside = true;
            while !pending.is_empty() {
                let mut call = ScriptArgs::default();
                call.key(kind_key(Kind::Account)).key(kind_key(Kind::Token));
                call.key(BALANCE).key(ACCOUNT_USED).key(TOKEN_USED).key(USAGE);
                call.key(APPLIED_BUCKETS).key(USAGE_OPEN).arg(self.last_usage_index());
                let records: Vec<_> = pending.iter().map(|&i| (&batch[i], &windows[i])).collect();
                let seen = if beside {
                    // A row is some 400 bytes: sized once rather than grown.
                    let mut rows = redis::Cmd::with_capacity(2 + records.len(), 64 + 512 * records.len());
                    rows.arg("LPUSHX").arg(USAGE_OPEN);
                    usage_batch::add(
                        &mut call,
                        9,
                        &records,
                        Some(&mut rows),
                        self.legacy_markers_before,
                        &self.retention,
                    );
                    match self.apply_beside(&call, rows).await? {
                        Beside::Seen(seen) => seen,
                        Beside::NoList => {
                            beside = false;
                            continue;
                        }
                    }
                } else {
                    usage_batch::add(&mut call, 9, &records, None, self.legacy_markers_before, &self.retention);
                    let mut invoke = SCRIPTS[0].prepare_invoke();
                    invoke.key(&call.keys[..]).arg(&call.args[..]);
                    invoke.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?
                };
                if seen.is_empty() {
                    outcome.applied += u32::try_from(pending.len()).unwrap_or(u32::MAX);
                    break;
                }
                outcome.duplicates += u32::try_from(seen.len()).unwrap_or(u32::MAX);
                let mut position = 0;
                pending.retain(|_| {
                    position += 1;
                    !seen.contains(&position)
                });
            }
        }
        Ok(outcome)
    }

    /// Runs the usage script `call` (its rows left out) and pushes `rows`
    /// (an `LPUSHX` to `USAGE_OPEN`) in one MULTI/EXEC: the script renames
    /// the usage list to `USAGE_OPEN` only when it applied the batch, so
    /// the rows land in it exactly then; a batch it refused, or a script
    /// Redis lost (`NOSCRIPT`: loaded, then the call is sent again), pushes
    /// nothing. Rows passed as script arguments would cost Redis more than
    /// the rest of the batch.
    async fn apply_beside(&self, call: &ScriptArgs, rows: redis::Cmd) -> Result<Beside> {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.add_command(call.evalsha(&SCRIPTS[0])).add_command(rows);
        pipe.cmd("LTRIM").arg(USAGE_OPEN).arg(0).arg(self.last_usage_index());
        // Fails (harmlessly) when the script did not rename the list.
        pipe.cmd("RENAME").arg(USAGE_OPEN).arg(USAGE);
        let mut conn = self.conn.clone();
        for attempt in 0..2 {
            let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await.map_err(StoreError::Redis)?;
            let mut replies = replies.into_iter();
            let seen = match replies.next() {
                Some(redis::Value::ServerError(error)) => {
                    if attempt == 0 && error.kind() == Some(redis::ServerErrorKind::NoScript) {
                        SCRIPTS[0].load_async(&mut conn).await.map_err(StoreError::Redis)?;
                        continue;
                    }
                    return Err(StoreError::Redis(error.into()));
                }
                Some(value) => redis::from_redis_value::<Vec<i64>>(value).map_err(|e| StoreError::Redis(e.into()))?,
                None => return Err(malformed("usage transaction answered nothing")),
            };
            if seen == [-1] {
                return Ok(Beside::NoList);
            }
            if seen.is_empty() {
                // The rows and the rename back must have landed.
                for reply in replies {
                    if let redis::Value::ServerError(error) = reply {
                        return Err(StoreError::Redis(error.into()));
                    }
                }
            }
            return seen
                .into_iter()
                .map(|i| usize::try_from(i).map_err(|_| malformed("usage script answered a bad position")))
                .collect::<Result<_>>()
                .map(Beside::Seen);
        }
        Err(malformed("usage script missing after it was loaded"))
    }
}

#[async_trait]
impl BudgetStore for RedisStore {
    async fn lease(&self, ask: &LeaseAsk) -> Result<Lease> {
        let kind = match ask.budget {
            Budget::Token(_) => "token",
            Budget::Account(_) => "account",
        };
        let buckets = self.current_window_keys(&ask.budget, ask.now).await?;
        let mut call = invocation(&SCRIPTS[1]);
        call.key(hold_key(&ask.budget));
        for bucket in &buckets {
            call.key(bucket);
        }
        call.arg(kind).arg(ask.budget.id()).arg(&ask.holder).arg(ask.need).arg(ask.want);
        call.arg(ask.now).arg(ask.ttl_secs).arg(HOLD_KEY_GRACE_SECS).arg(buckets.len());
        let (found, unlimited, remaining, granted, held, available): (i64, i64, i64, i64, i64, i64) =
            call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(Lease { granted, held, remaining, available, unlimited: unlimited == 1, missing: found == 0 })
    }

    async fn release(&self, budget: &Budget, holder: &str, amount: i64) -> Result<()> {
        let mut call = invocation(&SCRIPTS[2]);
        call.key(hold_key(budget)).arg(holder).arg(amount);
        let _: i64 = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(())
    }

    async fn charge(&self, record: &UsageRecord, now: i64) -> Result<Charged> {
        let windows = self.record_windows(std::slice::from_ref(record)).await?;
        let token = self.current_window_keys(&Budget::Token(record.token_id.clone()), now).await?;
        let account = self.current_window_keys(&Budget::Account(record.account_id.clone()), now).await?;
        let mut call = invocation(&SCRIPTS[3]);
        call.key(APPLIED_BUCKETS);
        call.key(hold_key(&Budget::Token(record.token_id.clone())));
        call.key(hold_key(&Budget::Account(record.account_id.clone())));
        for bucket in token.iter().chain(&account) {
            call.key(bucket);
        }
        call.arg(self.last_usage_index()).arg(now);
        call.arg(&record.token_id).arg(&record.account_id).arg(record.cost_micros);
        call.arg(token.len()).arg(account.len());
        let windows = windows.first().unwrap_or(&[None, None]);
        let first = 10 + token.len() + account.len();
        let mut batch = ScriptArgs::default();
        usage_batch::add(&mut batch, first, &[(record, windows)], None, self.legacy_markers_before, &self.retention);
        call.key(&batch.keys[..]).arg(&batch.args[..]);
        let reply: Vec<i64> = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(match reply.as_slice() {
            [0] => Charged::Applied,
            [1] => Charged::Duplicate,
            [2] => Charged::TokenQuota,
            [3, balance] => Charged::Balance { balance_micros: *balance },
            _ => return Err(malformed("charge script answered an unknown code")),
        })
    }

    async fn window_spent(&self, budget: &Budget, buckets: &[String]) -> Result<i64> {
        if buckets.is_empty() {
            return Ok(0);
        }
        let keys: Vec<String> = buckets.iter().map(|b| window_key(budget, b)).collect();
        let spent: Vec<Option<i64>> =
            redis::cmd("MGET").arg(keys).query_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        Ok(spent.into_iter().flatten().fold(0i64, i64::saturating_add))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
mod tests {
    use std::process::{Child, Command, Stdio};

    use redis::AsyncCommands as _;

    use super::*;
    use crate::store::Store;
    use crate::store::conformance::{account, account_counters, token, usage};
    use crate::store::rollup::Retention;

    /// A `redis-server` of the test's own on a free port; killed on drop.
    struct Server(Child);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn store(cap: u64) -> (Server, RedisStore) {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn redis-server (is it installed?)");
        let server = Server(child);
        let url = format!("redis://127.0.0.1:{port}/");
        for _ in 0..200 {
            if let Ok(store) = RedisStore::connect(&url).await {
                let retention = Retention { usage_max_records: cap, ..Retention::default() };
                return (server, store.with_retention(retention));
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("redis-server on port {port} never answered");
    }

    async fn listed(store: &RedisStore) -> Vec<String> {
        let rows: Vec<String> = store.conn.clone().lrange(USAGE, 0, -1).await.unwrap();
        rows.iter().map(|row| serde_json::from_str::<UsageRecord>(row).unwrap().request_id).collect()
    }

    #[tokio::test]
    async fn rows_pushed_beside_the_script_land_once_with_their_batch() {
        let (_server, store) = store(4).await;
        store.create(account("a", 1_000)).await.unwrap();
        store.create(token("t", "a")).await.unwrap();
        let record = |id: &str, cost| usage(id, "t", "a", "m", cost);

        // No list yet: the rows go as the script's arguments.
        let first = store.apply_usage(&[record("u1", 1), record("u2", 2)]).await.unwrap();
        assert_eq!((first.applied, first.duplicates), (2, 0));
        assert_eq!(listed(&store).await, ["u2", "u1"]);

        // Beside the script: the batch refused for its duplicate pushes
        // nothing, the rest is pushed once.
        let second = store.apply_usage(&[record("u2", 2), record("u3", 4)]).await.unwrap();
        assert_eq!((second.applied, second.duplicates), (1, 1));
        assert_eq!(listed(&store).await, ["u3", "u2", "u1"]);

        // Redis lost its scripts: the call is sent again once loaded, and
        // its rows land once, trimmed to the cap of four.
        let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut store.conn.clone()).await.unwrap();
        let third = store.apply_usage(&[record("u4", 8), record("u5", 16)]).await.unwrap();
        assert_eq!((third.applied, third.duplicates), (2, 0));
        assert_eq!(listed(&store).await, ["u5", "u4", "u3", "u2"]);
        assert_eq!(account_counters(&store, "a").await, (1_000 - 31, 31));
        let open: bool = store.conn.clone().exists(USAGE_OPEN).await.unwrap();
        assert!(!open, "the list is back under its name");
    }

    #[tokio::test]
    async fn markers_an_earlier_version_kept_in_a_hash_still_count_until_pruned() {
        use crate::store::rollup::RollupStore as _;
        let (_server, store) = store(0).await;
        store.create(account("a", 1_000)).await.unwrap();
        store.create(token("t", "a")).await.unwrap();
        let now = crate::domain::now_unix();
        let record = |id: &str| UsageRecord { created_at: now, ..usage(id, "t", "a", "m", 10) };
        // What an earlier version left: the hour's hash and its start.
        let start = usage_batch::applied_bucket(now);
        let mut conn = store.conn.clone();
        let () = conn.hset(super::super::layout::applied_bucket_key(start), "old", 1).await.unwrap();
        let () = conn.zadd(APPLIED_BUCKETS, start, start).await.unwrap();

        let outcome = store.apply_usage(&[record("old"), record("new")]).await.unwrap();
        assert_eq!((outcome.applied, outcome.duplicates), (1, 1), "the hash's record is a duplicate");
        let again = store.apply_usage(&[record("new")]).await.unwrap();
        assert_eq!((again.applied, again.duplicates), (0, 1), "the set's record is a duplicate");
        assert_eq!(account_counters(&store, "a").await, (990, 10));
        let set = super::super::layout::applied_set_key(start);
        let members: Vec<String> = conn.smembers(&set).await.unwrap();
        assert_eq!(members, ["new"]);

        // Past the rows' retention and the window, both go.
        store.prune(now + 400 * 24 * 60 * 60).await.unwrap();
        let left: usize = conn.exists(&[set, super::super::layout::applied_bucket_key(start)]).await.unwrap();
        assert_eq!(left, 0, "the hour's markers outlived its rows and the window");
    }
}
