//! The Lua scripts of the resource store's writes and reads: each runs
//! atomically on the server, so a write, its revision and its change-feed
//! entry land together. Scripts that write one resource share `BUMP` (and
//! those with names `NAME_TAKEN`), put around the body where it is loaded.

/// Bumps the revision and appends `ARGV[3]/ARGV[1]` to the feed; for the
/// single-resource scripts, whose keys are 1 kind hash, 2 `{gw}:rev`,
/// 3 `{gw}:changes`, 4 the kind's name index, 5… counter hashes, and args 1 id,
/// 2 JSON, 3 kind, 4 feed length, 5 the script's own, 6… counter values
/// (`ARGV[i + 1]` goes with `KEYS[i]`).
pub(super) const BUMP: &str = r"
local rev = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], string.format('%d-0', rev), 'kind', ARGV[3], 'id', ARGV[1])
";

/// True when `name` belongs to a resource other than `id` that still exists.
pub(super) const NAME_TAKEN: &str = r"
local function name_taken(name, id)
  if name == '' then return false end
  local owner = redis.call('HGET', KEYS[4], name)
  return owner and owner ~= id and redis.call('HEXISTS', KEYS[1], owner) == 1
end
";

/// ARGV[5] is the resource's unique name ('' for none). Returns nil when
/// the id is taken, -1 when the name is, else the new revision.
pub(super) const CREATE: &str = r"
if name_taken(ARGV[5], ARGV[1]) then return -1 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return false end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[4], ARGV[5], ARGV[1]) end
for i = 5, #KEYS do redis.call('HSET', KEYS[i], ARGV[1], ARGV[i + 1]) end
";

/// ARGV[5] is the JSON the patch was applied to, ARGV[6] and ARGV[7] the
/// unique names before and after ('' for none). Returns nil for a missing
/// resource, 0 when the JSON changed meanwhile (nothing written; a revision
/// is never 0), -1 when the new name is taken, else the new revision.
pub(super) const MODIFY: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return false end
if stored ~= ARGV[5] then return 0 end
if ARGV[6] ~= ARGV[7] then
  if name_taken(ARGV[7], ARGV[1]) then return -1 end
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[4], ARGV[7], ARGV[1]) end
  if ARGV[6] ~= '' and redis.call('HGET', KEYS[4], ARGV[6]) == ARGV[1] then redis.call('HDEL', KEYS[4], ARGV[6]) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
";

/// ARGV[5] is the indexed field of the kind ('' for none).
pub(super) const DELETE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[5] ~= '' then
  local name = cjson.decode(stored)[ARGV[5]]
  if type(name) == 'string' and redis.call('HGET', KEYS[4], name) == ARGV[1] then redis.call('HDEL', KEYS[4], name) end
end
for i = 5, #KEYS do redis.call('HDEL', KEYS[i], ARGV[1]) end
";

/// Keys 1 kind hash, 2 its name index, 3 the index's "built" marker; ARGV[1]
/// the indexed field. Builds the index from the stored resources once (the
/// first of duplicates written before the rule wins); a no-op once the
/// marker is set.
pub(super) const INDEX_NAMES: &str = r"
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local name = cjson.decode(all[i + 1])[ARGV[1]]
  if type(name) == 'string' and name ~= '' then redis.call('HSETNX', KEYS[2], name, all[i]) end
end
redis.call('SET', KEYS[3], '1')
return 1
";

/// Keys 4 `{gw}:balance`, 5 `{gw}:account_used`; ARGV[2] is the delta. Returns
/// `{rev, json, balance, used}` or nil for a missing account.
pub(super) const ADJUST: &str = r"
local json = redis.call('HGET', KEYS[1], ARGV[1])
if not json then return false end
local balance = redis.call('HINCRBY', KEYS[4], ARGV[1], ARGV[2])
";
pub(super) const ADJUST_RETURN: &str = r"
return {rev, json, balance, redis.call('HGET', KEYS[5], ARGV[1]) or '0'}
";

/// Keys 1 `{gw}:token`, 2 `{gw}:rev`, 3 `{gw}:changes`, 4
/// `{gw}:names:token`; ARGV[1]
/// the feed length, then `id, key hash, JSON` per row. Writes every row whose
/// id is free and whose key hash no stored token or earlier row has, at one
/// revision with a feed entry `<rev>-<n>` each. Returns `{rev or 0, codes}`,
/// a code per row: '' written, 'id' id taken, 'repeat' key of an earlier
/// row, else the id of the token holding the key.
pub(super) const IMPORT: &str = r"
local codes, written, seen = {}, {}, {}
for i = 2, #ARGV, 3 do
  local id, hash = ARGV[i], ARGV[i + 1]
  local code = ''
  if redis.call('HEXISTS', KEYS[1], id) == 1 then
    code = 'id'
  elseif hash ~= '' and seen[hash] then
    code = 'repeat'
  elseif hash ~= '' then
    local owner = redis.call('HGET', KEYS[4], hash)
    if owner and redis.call('HEXISTS', KEYS[1], owner) == 1 then code = owner end
  end
  if code == '' then
    redis.call('HSET', KEYS[1], id, ARGV[i + 2])
    if hash ~= '' then
      redis.call('HSET', KEYS[4], hash, id)
      seen[hash] = true
    end
    written[#written + 1] = id
  end
  codes[#codes + 1] = code
end
local rev = 0
if #written > 0 then
  rev = redis.call('INCR', KEYS[2])
  for n, id in ipairs(written) do
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[1], string.format('%d-%d', rev, n - 1), 'kind', 'token', 'id', id)
  end
end
return {rev, codes}
";

/// Keys: 1 `{gw}:rev`, 2 `{gw}:changes`; ARGV[1] the revision asked about.
/// Returns `{0}` when the feed cannot answer, else `{1, entries after it}`.
pub(super) const CHANGES_SINCE: &str = r"
local rev = tonumber(redis.call('GET', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
if since > rev then return {0} end
if since == rev then return {1, {}} end
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
if not first then return {0} end
local dash = string.find(first[1], '-', 1, true)
local r, n = tonumber(string.sub(first[1], 1, dash - 1)), tonumber(string.sub(first[1], dash + 1))
if r > since + 1 or (r == since + 1 and n > 0) then return {0} end
return {1, redis.call('XRANGE', KEYS[2], string.format('%d-0', since + 1), '+')}
";

/// Key: 1 the permits of one key and window. Args: 1 limit, 2 want, 3 TTL.
/// Grants what is left of the limit, up to `want`; returns the grant.
pub(super) const TAKE_PERMITS: &str = r"
local granted = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = math.min(tonumber(ARGV[2]), tonumber(ARGV[1]) - granted)
if grant <= 0 then return 0 end
redis.call('INCRBY', KEYS[1], grant)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return grant
";
