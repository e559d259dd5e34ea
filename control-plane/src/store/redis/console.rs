//! Console users, sessions, tickets and top-up codes on Redis.
//!
//! Layout: `{gw:console}:user`, a hash id → JSON of the user (without its
//! last sign-in); `{gw:console}:user_name`, name → id; `{gw:console}:user_login`,
//! id → Unix second of the last sign-in, written on its own so a sign-in
//! never undoes a concurrent `put_user`. `gw:session:<hash>`, a hash (`json`,
//! and `seen` and `playground`, which change on their own) and
//! `gw:ticket:<hash>`, a string of JSON: one key each, expiring at the
//! session's or ticket's `expires_at`. `{gw}:topup`, id → JSON of the code,
//! and `{gw}:topup_hash`, code hash → id, in the policy slot, because a
//! redemption marks the code and credits the balance in one script.
//!
//! A code changes at most once (active to redeemed or revoked), so revoke
//! and redeem are compare-and-set on its JSON: each attempt either writes
//! or finds the code changed and decides again on what it now is.

use std::collections::HashMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use redis::{AsyncCommands as _, Script, Value};

use super::layout::{
    ACCOUNT_USED, BALANCE, CHANGES, REV, TOPUP, TOPUP_HASH, USER_NAMES, USERS, USERS_LOGIN, kind_key, session_key,
    ticket_key,
};
use super::scripts::{ADJUST, ADJUST_RETURN, BUMP};
use super::{FEED_RETAIN, RedisStore, decode, malformed, take};
use crate::domain::console::{CodeStatus, Redemption, Session, Ticket, TopupCode, User};
use crate::domain::{Kind, now_unix};
use crate::store::console::ConsoleStore;
use crate::store::{Result, StoreError};

/// Compare-and-set attempts of one revoke or redemption; a code changes at
/// most once, so two always suffice unless the store is tampered with.
const CODE_ATTEMPTS: u32 = 8;

/// Keys 1 `{gw:console}:user`, 2 `{gw:console}:user_name`, 3
/// `{gw:console}:user_login`; args 1 id, 2 name, 3 JSON, 4 last sign-in.
/// Returns 0 for a taken id, -1 for a taken name, 1 when stored.
const CREATE_USER: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
if tonumber(ARGV[4]) > 0 then redis.call('HSET', KEYS[3], ARGV[1], ARGV[4]) end
return 1
";

/// Keys 1 `{gw:console}:user`, 2 `{gw:console}:user_name`; args 1 id, 2 name,
/// 3 JSON. Returns 0 for a missing user, -1 when a new name is taken, 1 when
/// written (moving the name index along with a rename).
const PUT_USER: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return 0 end
local old = cjson.decode(stored).name
if old ~= ARGV[2] then
  local owner = redis.call('HGET', KEYS[2], ARGV[2])
  if owner and owner ~= ARGV[1] then return -1 end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
  if type(old) == 'string' and redis.call('HGET', KEYS[2], old) == ARGV[1] then redis.call('HDEL', KEYS[2], old) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
";

/// Keys 1 `{gw:console}:user`, 2 `{gw:console}:user_login`; args 1 id, 2 Unix
/// second. The last sign-in only moves forward.
const TOUCH_USER: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if tonumber(ARGV[2]) > last then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return 1
";

/// Key 1 a session; args 1 field, 2 value. Sets the field of a session that
/// still exists (its expiry stays); returns whether it did.
const SET_FIELD: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// Keys 1 `{gw}:topup`, 2 `{gw}:topup_hash`; args `id, code hash, JSON` per
/// code. Writes every code, or none when an id or hash is taken (stored or
/// earlier in the batch); returns 0, or the row (from 1) of the first
/// refused code.
const CREATE_CODES: &str = r"
local ids, hashes, row = {}, {}, 0
for i = 1, #ARGV, 3 do
  row = row + 1
  local id, hash = ARGV[i], ARGV[i + 1]
  if ids[id] or hashes[hash] then return row end
  if redis.call('HEXISTS', KEYS[1], id) == 1 or redis.call('HEXISTS', KEYS[2], hash) == 1 then return row end
  ids[id], hashes[hash] = true, true
end
for i = 1, #ARGV, 3 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
  redis.call('HSET', KEYS[2], ARGV[i + 1], ARGV[i])
end
return 0
";

/// Keys 1 `{gw}:topup_hash`, 2 `{gw}:topup`; arg 1 code hash. Returns the
/// code's JSON, or nil.
const FIND_CODE: &str = r"
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return false end
return redis.call('HGET', KEYS[2], id)
";

/// Key 1 `{gw}:topup`; args 1 id, 2 the JSON read, 3 the new JSON. Returns 0
/// for a missing code, 2 when it changed meanwhile, 1 when written.
const SWAP_CODE: &str = r"
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if not stored then return 0 end
if stored ~= ARGV[2] then return 2 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
";

/// The head of the redemption, before `ADJUST` (whose keys and args it
/// shares: keys 1 `{gw}:account`, 2 `{gw}:rev`, 3 `{gw}:changes`, 4
/// `{gw}:balance`, 5 `{gw}:account_used`; args 1 account id, 2 the code's
/// amount, 3 `account`, 4 feed length), with key 6 `{gw}:topup` and args 5
/// code id, 6 its JSON as read (redeemable), 7 its JSON redeemed. Returns 0
/// when the code changed since it was read, -1 for a missing account.
const REDEEM_CHECK: &str = r"
if redis.call('HGET', KEYS[6], ARGV[5]) ~= ARGV[6] then return 0 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
";
/// After `ADJUST` credited the balance (which fails, writing nothing, on an
/// overflow), marks the code redeemed; then `BUMP` and `ADJUST_RETURN`.
const REDEEM_MARK: &str = r"
redis.call('HSET', KEYS[6], ARGV[5], ARGV[7])
";

/// The scripts, hashed once; sent with EVALSHA, loaded on the first NOSCRIPT.
struct Scripts {
    create_user: Script,
    put_user: Script,
    touch_user: Script,
    set_field: Script,
    create_codes: Script,
    find_code: Script,
    swap_code: Script,
    redeem: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    create_user: Script::new(CREATE_USER),
    put_user: Script::new(PUT_USER),
    touch_user: Script::new(TOUCH_USER),
    set_field: Script::new(SET_FIELD),
    create_codes: Script::new(CREATE_CODES),
    find_code: Script::new(FIND_CODE),
    swap_code: Script::new(SWAP_CODE),
    redeem: Script::new(&format!("{REDEEM_CHECK}{ADJUST}{REDEEM_MARK}{BUMP}{ADJUST_RETURN}")),
});

#[async_trait]
impl ConsoleStore for RedisStore {
    async fn create_user(&self, user: &User) -> Result<()> {
        let created: i64 = SCRIPTS
            .create_user
            .key(USERS)
            .key(USER_NAMES)
            .key(USERS_LOGIN)
            .arg(&user.id)
            .arg(&user.name)
            .arg(stored_user(user)?)
            .arg(user.last_login_at)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        match created {
            1 => Ok(()),
            0 => Err(StoreError::UserExists { id: user.id.clone() }),
            _ => Err(StoreError::UserNameTaken { name: user.name.clone() }),
        }
    }

    async fn get_user(&self, id: &str) -> Result<Option<User>> {
        let (json, login): (Option<String>, Option<i64>) = redis::pipe()
            .hget(USERS, id)
            .hget(USERS_LOGIN, id)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        json.map(|json| with_login(&json, login)).transpose()
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        let id: Option<String> = self.conn.clone().hget(USER_NAMES, name).await.map_err(StoreError::Redis)?;
        match id {
            Some(id) => self.get_user(&id).await,
            None => Ok(None),
        }
    }

    async fn list_users(&self) -> Result<Vec<User>> {
        let (all, logins): (HashMap<String, String>, HashMap<String, i64>) = redis::pipe()
            .hgetall(USERS)
            .hgetall(USERS_LOGIN)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let mut users: Vec<User> =
            all.iter().map(|(id, json)| with_login(json, logins.get(id).copied())).collect::<Result<_>>()?;
        users.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(users)
    }

    async fn put_user(&self, user: &User) -> Result<()> {
        let written: i64 = SCRIPTS
            .put_user
            .key(USERS)
            .key(USER_NAMES)
            .arg(&user.id)
            .arg(&user.name)
            .arg(stored_user(user)?)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        match written {
            1 => Ok(()),
            0 => Err(StoreError::NoUser { id: user.id.clone() }),
            _ => Err(StoreError::UserNameTaken { name: user.name.clone() }),
        }
    }

    async fn touch_user(&self, id: &str, at: i64) -> Result<()> {
        let _: i64 = SCRIPTS
            .touch_user
            .key(USERS)
            .key(USERS_LOGIN)
            .arg(id)
            .arg(at)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(())
    }

    async fn put_session(&self, session: &Session) -> Result<()> {
        let key = session_key(&session.id_hash);
        let mut conn = self.conn.clone();
        // Already over: storing it would only let a past expiry be refused.
        if session.expires_at <= now_unix() {
            return conn.del(&key).await.map_err(StoreError::Redis);
        }
        let json = serde_json::to_string(session).map_err(StoreError::Corrupt)?;
        redis::pipe()
            .atomic()
            .del(&key)
            .ignore()
            .cmd("HSET")
            .arg(&key)
            .arg("json")
            .arg(json)
            .arg("seen")
            .arg(session.last_seen_at)
            .arg("playground")
            .arg(&session.playground_key)
            .ignore()
            .cmd("EXPIREAT")
            .arg(&key)
            .arg(session.expires_at)
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(StoreError::Redis)
    }

    async fn get_session(&self, id_hash: &str) -> Result<Option<Session>> {
        let (json, seen, playground): (Option<String>, Option<i64>, Option<String>) = redis::cmd("HMGET")
            .arg(session_key(id_hash))
            .arg("json")
            .arg("seen")
            .arg("playground")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        let Some(json) = json else { return Ok(None) };
        let mut session: Session = decode(&json)?;
        if let Some(seen) = seen {
            session.last_seen_at = seen;
        }
        if let Some(playground) = playground {
            session.playground_key = playground;
        }
        // Redis forgets it at its expiry; this covers the moment before.
        Ok((now_unix() < session.expires_at).then_some(session))
    }

    async fn touch_session(&self, id_hash: &str, at: i64) -> Result<()> {
        self.set_session_field(id_hash, "seen", &at.to_string()).await
    }

    async fn set_playground_key(&self, id_hash: &str, key: &str) -> Result<()> {
        self.set_session_field(id_hash, "playground", key).await
    }

    async fn delete_session(&self, id_hash: &str) -> Result<()> {
        self.conn.clone().del(session_key(id_hash)).await.map_err(StoreError::Redis)
    }

    async fn put_ticket(&self, ticket: &Ticket) -> Result<()> {
        let key = ticket_key(&ticket.hash);
        let mut conn = self.conn.clone();
        if ticket.expires_at <= now_unix() {
            return conn.del(&key).await.map_err(StoreError::Redis);
        }
        let json = serde_json::to_string(ticket).map_err(StoreError::Corrupt)?;
        redis::cmd("SET")
            .arg(&key)
            .arg(json)
            .arg("EXAT")
            .arg(ticket.expires_at)
            .query_async(&mut conn)
            .await
            .map_err(StoreError::Redis)
    }

    async fn take_ticket(&self, hash: &str) -> Result<Option<Ticket>> {
        let json: Option<String> = redis::cmd("GETDEL")
            .arg(ticket_key(hash))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        unexpired_ticket(json)
    }

    async fn peek_ticket(&self, hash: &str) -> Result<Option<Ticket>> {
        let json: Option<String> = self.conn.clone().get(ticket_key(hash)).await.map_err(StoreError::Redis)?;
        unexpired_ticket(json)
    }

    async fn create_topup_codes(&self, codes: &[TopupCode]) -> Result<()> {
        if codes.is_empty() {
            return Ok(());
        }
        let mut call = SCRIPTS.create_codes.prepare_invoke();
        call.key(TOPUP).key(TOPUP_HASH);
        for code in codes {
            call.arg(&code.id).arg(&code.code_hash).arg(serde_json::to_string(code).map_err(StoreError::Corrupt)?);
        }
        let refused: usize = call.invoke_async(&mut self.conn.clone()).await.map_err(StoreError::Redis)?;
        match refused.checked_sub(1).and_then(|row| codes.get(row)) {
            None => Ok(()),
            Some(code) => Err(StoreError::CodeExists { id: code.id.clone() }),
        }
    }

    async fn list_topup_codes(&self) -> Result<Vec<TopupCode>> {
        let all: HashMap<String, String> = self.conn.clone().hgetall(TOPUP).await.map_err(StoreError::Redis)?;
        let mut codes: Vec<TopupCode> = all.values().map(|json| decode(json)).collect::<Result<_>>()?;
        codes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(codes)
    }

    async fn revoke_topup_code(&self, id: &str, at: i64) -> Result<TopupCode> {
        let mut conn = self.conn.clone();
        for _ in 0..CODE_ATTEMPTS {
            let read: Option<String> = conn.hget(TOPUP, id).await.map_err(StoreError::Redis)?;
            let Some(read) = read else { return Err(StoreError::NoCode { id: id.to_owned() }) };
            let mut code: TopupCode = decode(&read)?;
            match code.status {
                CodeStatus::Redeemed => return Err(redeemed(id)),
                CodeStatus::Revoked => return Ok(code),
                CodeStatus::Active => {}
            }
            code.status = CodeStatus::Revoked;
            code.revoked_at = at;
            let json = serde_json::to_string(&code).map_err(StoreError::Corrupt)?;
            let done: i64 = SCRIPTS
                .swap_code
                .key(TOPUP)
                .arg(id)
                .arg(&read)
                .arg(json)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::Redis)?;
            match done {
                1 => return Ok(code),
                0 => return Err(StoreError::NoCode { id: id.to_owned() }),
                _ => {}
            }
        }
        Err(contended(id))
    }

    async fn redeem_topup_code(&self, code_hash: &str, account_id: &str, at: i64) -> Result<Redemption> {
        let mut conn = self.conn.clone();
        for _ in 0..CODE_ATTEMPTS {
            let read: Option<String> = SCRIPTS
                .find_code
                .key(TOPUP_HASH)
                .key(TOPUP)
                .arg(code_hash)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::Redis)?;
            let Some(read) = read else { return Ok(Redemption::Unknown) };
            let mut code: TopupCode = decode(&read)?;
            if let Some(refused) = not_redeemable(&code, at) {
                return Ok(refused);
            }
            code.status = CodeStatus::Redeemed;
            account_id.clone_into(&mut code.redeemed_by);
            code.redeemed_at = at;
            let json = serde_json::to_string(&code).map_err(StoreError::Corrupt)?;
            let reply: Value = SCRIPTS
                .redeem
                .key(kind_key(Kind::Account))
                .key(REV)
                .key(CHANGES)
                .key(BALANCE)
                .key(ACCOUNT_USED)
                .key(TOPUP)
                .arg(account_id)
                .arg(code.amount_micros)
                .arg(Kind::Account.as_str())
                .arg(FEED_RETAIN)
                .arg(&code.id)
                .arg(&read)
                .arg(json)
                .invoke_async(&mut conn)
                .await
                .map_err(StoreError::Redis)?;
            match reply {
                Value::Int(0) => continue,
                Value::Int(_) => return Ok(Redemption::NoAccount),
                Value::Array(values) => {
                    let mut values = values.into_iter();
                    let revision: u64 = take(&mut values)?;
                    let _account: String = take(&mut values)?;
                    let balance_micros: i64 = take(&mut values)?;
                    self.published(revision);
                    return Ok(Redemption::Credited { code, balance_micros });
                }
                _ => return Err(malformed("redeem answered neither a number nor a list")),
            }
        }
        Err(contended(code_hash))
    }
}

// === impl RedisStore ===

impl RedisStore {
    /// Sets `field` of session `id_hash` to `value`, when the session exists.
    async fn set_session_field(&self, id_hash: &str, field: &str, value: &str) -> Result<()> {
        let _: i64 = SCRIPTS
            .set_field
            .key(session_key(id_hash))
            .arg(field)
            .arg(value)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(StoreError::Redis)?;
        Ok(())
    }
}

/// Why `code` cannot be redeemed at `at`; `None` when it can.
fn not_redeemable(code: &TopupCode, at: i64) -> Option<Redemption> {
    match code.status {
        CodeStatus::Redeemed => Some(Redemption::Used),
        CodeStatus::Revoked => Some(Redemption::Revoked),
        CodeStatus::Active if !code.redeemable(at) => Some(Redemption::Expired),
        CodeStatus::Active => None,
    }
}

/// Revoking a redeemed code.
fn redeemed(id: &str) -> StoreError {
    StoreError::Rejected { reason: format!("top-up code {id:?} was redeemed; it can no longer be revoked") }
}

fn contended(code: &str) -> StoreError {
    StoreError::Rejected { reason: format!("top-up code {code:?} kept changing concurrently; try again") }
}

/// JSON of `user` as `{gw:console}:user` keeps it: without its last sign-in.
fn stored_user(user: &User) -> Result<String> {
    let stored = User { last_login_at: 0, ..user.clone() };
    serde_json::to_string(&stored).map_err(StoreError::Corrupt)
}

/// A user from its stored JSON and last sign-in.
fn with_login(json: &str, login: Option<i64>) -> Result<User> {
    let mut user: User = decode(json)?;
    user.last_login_at = login.unwrap_or(0);
    Ok(user)
}

/// The ticket of `json`, unless it is past its expiry (Redis forgets it at
/// that second; this covers the moment before).
fn unexpired_ticket(json: Option<String>) -> Result<Option<Ticket>> {
    let ticket = json.map(|json| decode::<Ticket>(&json)).transpose()?;
    Ok(ticket.filter(|ticket| now_unix() < ticket.expires_at))
}
