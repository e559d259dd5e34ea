//! Console users, sessions, tickets and top-up codes in the embedded store:
//! `console_users`, id → JSON, and `console_user_names`, name → id;
//! `console_sessions` and `console_tickets`, hash → JSON, each with an
//! expiry index `(expires_at, hash)` that writes prune a batch of at a time
//! (reads treat what is past its expiry as gone); `topup_codes`, id → JSON,
//! and `topup_code_hashes`, code hash → id. Each write is one redb
//! transaction, so an index always agrees with its table and a redemption
//! marks the code and credits the balance (and the change feed) together.

use async_trait::async_trait;
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::Deserialize;

use super::video::open_read;
use super::{EmbeddedStore, charge, db_err, decode, encode, resources};
use crate::domain::console::{CodeStatus, Redemption, Session, Ticket, TopupCode, User};
use crate::domain::{Kind, Resource, now_unix};
use crate::store::console::ConsoleStore;
use crate::store::{Result, StoreError};

const USERS: TableDefinition<&str, &[u8]> = TableDefinition::new("console_users");
const USER_NAMES: TableDefinition<&str, &str> = TableDefinition::new("console_user_names");
const SESSIONS: Expiring = Expiring {
    values: TableDefinition::new("console_sessions"),
    expiry: TableDefinition::new("console_session_expiry"),
};
const TICKETS: Expiring =
    Expiring { values: TableDefinition::new("console_tickets"), expiry: TableDefinition::new("console_ticket_expiry") };
const CODES: TableDefinition<&str, &[u8]> = TableDefinition::new("topup_codes");
const CODE_HASHES: TableDefinition<&str, &str> = TableDefinition::new("topup_code_hashes");

/// Expired sessions or tickets forgotten per write of one, to bound its cost.
const PRUNE_BATCH: usize = 100;

/// A table of values that expire, hash → JSON, and its expiry index.
struct Expiring {
    values: TableDefinition<'static, &'static str, &'static [u8]>,
    expiry: TableDefinition<'static, (i64, &'static str), ()>,
}

/// The expiry of a stored session or ticket.
#[derive(Deserialize)]
struct Expiry {
    expires_at: i64,
}

#[async_trait]
impl ConsoleStore for EmbeddedStore {
    async fn create_user(&self, user: &User) -> Result<()> {
        let user = user.clone();
        self.write(move |txn| {
            let mut users = txn.open_table(USERS).map_err(db_err)?;
            let mut names = txn.open_table(USER_NAMES).map_err(db_err)?;
            if users.get(user.id.as_str()).map_err(db_err)?.is_some() {
                return Err(StoreError::UserExists { id: user.id });
            }
            if names.get(user.name.as_str()).map_err(db_err)?.is_some() {
                return Err(StoreError::UserNameTaken { name: user.name });
            }
            users.insert(user.id.as_str(), encode(&user)?.as_slice()).map_err(db_err)?;
            names.insert(user.name.as_str(), user.id.as_str()).map_err(db_err)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn get_user(&self, id: &str) -> Result<Option<User>> {
        let id = id.to_owned();
        self.read(move |txn| {
            let Some(users) = open_read(txn, USERS)? else { return Ok(None) };
            let json = users.get(id.as_str()).map_err(db_err)?;
            json.map(|json| decode(json.value())).transpose()
        })
        .await
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        let name = name.to_owned();
        self.read(move |txn| {
            let (Some(names), Some(users)) = (open_read(txn, USER_NAMES)?, open_read(txn, USERS)?) else {
                return Ok(None);
            };
            let Some(id) = names.get(name.as_str()).map_err(db_err)? else { return Ok(None) };
            let json = users.get(id.value()).map_err(db_err)?;
            json.map(|json| decode(json.value())).transpose()
        })
        .await
    }

    async fn list_users(&self) -> Result<Vec<User>> {
        self.read(|txn| {
            let Some(users) = open_read(txn, USERS)? else { return Ok(Vec::new()) };
            // Keys compare bytewise, which is `String`'s order too.
            let mut out = Vec::new();
            for entry in users.iter().map_err(db_err)? {
                let (_, json) = entry.map_err(db_err)?;
                out.push(decode(json.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn put_user(&self, user: &User) -> Result<()> {
        let mut user = user.clone();
        self.write(move |txn| {
            let mut users = txn.open_table(USERS).map_err(db_err)?;
            let mut names = txn.open_table(USER_NAMES).map_err(db_err)?;
            let stored: Option<User> =
                users.get(user.id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            let Some(stored) = stored else { return Err(StoreError::NoUser { id: user.id }) };
            if stored.name != user.name {
                let owner = names.get(user.name.as_str()).map_err(db_err)?.map(|id| id.value().to_owned());
                if owner.is_some_and(|owner| owner != user.id) {
                    return Err(StoreError::UserNameTaken { name: user.name });
                }
                names.insert(user.name.as_str(), user.id.as_str()).map_err(db_err)?;
                let old_owner = names.get(stored.name.as_str()).map_err(db_err)?.map(|id| id.value() == user.id);
                if old_owner == Some(true) {
                    names.remove(stored.name.as_str()).map_err(db_err)?;
                }
            }
            user.last_login_at = stored.last_login_at;
            users.insert(user.id.as_str(), encode(&user)?.as_slice()).map_err(db_err)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn touch_user(&self, id: &str, at: i64) -> Result<()> {
        let id = id.to_owned();
        self.write(move |txn| {
            let mut users = txn.open_table(USERS).map_err(db_err)?;
            let stored: Option<User> =
                users.get(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            if let Some(mut user) = stored.filter(|user| at > user.last_login_at) {
                user.last_login_at = at;
                users.insert(id.as_str(), encode(&user)?.as_slice()).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn put_session(&self, session: &Session) -> Result<()> {
        let session = session.clone();
        let now = now_unix();
        self.write(move |txn| {
            put_expiring(txn, &SESSIONS, &session.id_hash, session.expires_at, &encode(&session)?, now)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn get_session(&self, id_hash: &str) -> Result<Option<Session>> {
        let id_hash = id_hash.to_owned();
        let now = now_unix();
        self.read(move |txn| {
            let Some(sessions) = open_read(txn, SESSIONS.values)? else { return Ok(None) };
            let json = sessions.get(id_hash.as_str()).map_err(db_err)?;
            let session: Option<Session> = json.map(|json| decode(json.value())).transpose()?;
            Ok(session.filter(|session| now < session.expires_at))
        })
        .await
    }

    async fn touch_session(&self, id_hash: &str, at: i64) -> Result<()> {
        self.change_session(id_hash, move |session| session.last_seen_at = at).await
    }

    async fn set_playground_key(&self, id_hash: &str, key: &str) -> Result<()> {
        let key = key.to_owned();
        self.change_session(id_hash, move |session| session.playground_key = key).await
    }

    async fn delete_session(&self, id_hash: &str) -> Result<()> {
        let id_hash = id_hash.to_owned();
        self.write(move |txn| {
            // Its expiry entry goes when pruned: it names a session that is gone.
            txn.open_table(SESSIONS.values).map_err(db_err)?.remove(id_hash.as_str()).map_err(db_err)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn put_ticket(&self, ticket: &Ticket) -> Result<()> {
        let ticket = ticket.clone();
        let now = now_unix();
        self.write(move |txn| {
            put_expiring(txn, &TICKETS, &ticket.hash, ticket.expires_at, &encode(&ticket)?, now)?;
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn take_ticket(&self, hash: &str) -> Result<Option<Ticket>> {
        let hash = hash.to_owned();
        let now = now_unix();
        let (ticket, _) = self
            .write(move |txn| {
                let mut tickets = txn.open_table(TICKETS.values).map_err(db_err)?;
                let removed = tickets.remove(hash.as_str()).map_err(db_err)?;
                let ticket: Option<Ticket> = removed.map(|json| decode(json.value())).transpose()?;
                Ok((ticket.filter(|ticket| now < ticket.expires_at), vec![]))
            })
            .await?;
        Ok(ticket)
    }

    async fn peek_ticket(&self, hash: &str) -> Result<Option<Ticket>> {
        let hash = hash.to_owned();
        let now = now_unix();
        self.read(move |txn| {
            let Some(tickets) = open_read(txn, TICKETS.values)? else { return Ok(None) };
            let ticket: Option<Ticket> =
                tickets.get(hash.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            Ok(ticket.filter(|ticket| now < ticket.expires_at))
        })
        .await
    }

    async fn create_topup_codes(&self, codes: &[TopupCode]) -> Result<()> {
        let codes = codes.to_vec();
        self.write(move |txn| {
            let mut stored = txn.open_table(CODES).map_err(db_err)?;
            let mut hashes = txn.open_table(CODE_HASHES).map_err(db_err)?;
            // A refusal aborts the transaction: the codes before it go too.
            for code in &codes {
                let taken = stored.get(code.id.as_str()).map_err(db_err)?.is_some()
                    || hashes.get(code.code_hash.as_str()).map_err(db_err)?.is_some();
                if taken {
                    return Err(StoreError::CodeExists { id: code.id.clone() });
                }
                stored.insert(code.id.as_str(), encode(code)?.as_slice()).map_err(db_err)?;
                hashes.insert(code.code_hash.as_str(), code.id.as_str()).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }

    async fn list_topup_codes(&self) -> Result<Vec<TopupCode>> {
        self.read(|txn| {
            let Some(codes) = open_read(txn, CODES)? else { return Ok(Vec::new()) };
            let mut out = Vec::new();
            for entry in codes.iter().map_err(db_err)? {
                let (_, json) = entry.map_err(db_err)?;
                out.push(decode(json.value())?);
            }
            Ok(out)
        })
        .await
    }

    async fn revoke_topup_code(&self, id: &str, at: i64) -> Result<TopupCode> {
        let id = id.to_owned();
        let (code, _) = self
            .write(move |txn| {
                let mut codes = txn.open_table(CODES).map_err(db_err)?;
                let stored: Option<TopupCode> =
                    codes.get(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(mut code) = stored else { return Err(StoreError::NoCode { id }) };
                match code.status {
                    CodeStatus::Redeemed => return Err(redeemed(&id)),
                    CodeStatus::Revoked => return Ok((code, vec![])),
                    CodeStatus::Active => {}
                }
                code.status = CodeStatus::Revoked;
                code.revoked_at = at;
                codes.insert(id.as_str(), encode(&code)?.as_slice()).map_err(db_err)?;
                Ok((code, vec![]))
            })
            .await?;
        Ok(code)
    }

    async fn redeem_topup_code(&self, code_hash: &str, account_id: &str, at: i64) -> Result<Redemption> {
        let (code_hash, account_id) = (code_hash.to_owned(), account_id.to_owned());
        let (redemption, _) = self
            .write(move |txn| {
                let hashes = txn.open_table(CODE_HASHES).map_err(db_err)?;
                let Some(id) = hashes.get(code_hash.as_str()).map_err(db_err)?.map(|id| id.value().to_owned()) else {
                    return Ok((Redemption::Unknown, vec![]));
                };
                let mut codes = txn.open_table(CODES).map_err(db_err)?;
                let stored: Option<TopupCode> =
                    codes.get(id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(mut code) = stored else { return Ok((Redemption::Unknown, vec![])) };
                if let Some(refused) = not_redeemable(&code, at) {
                    return Ok((refused, vec![]));
                }
                let mut accounts = txn.open_table(resources(Kind::Account)).map_err(db_err)?;
                let credited = charge(&mut accounts, Kind::Account, &account_id, |resource| {
                    if let Resource::Account(account) = resource {
                        account.balance_micros = account.balance_micros.saturating_add(code.amount_micros);
                    }
                })?;
                let Some(Resource::Account(account)) = credited else { return Ok((Redemption::NoAccount, vec![])) };
                code.status = CodeStatus::Redeemed;
                account_id.clone_into(&mut code.redeemed_by);
                code.redeemed_at = at;
                codes.insert(id.as_str(), encode(&code)?.as_slice()).map_err(db_err)?;
                let redemption = Redemption::Credited { code, balance_micros: account.balance_micros };
                Ok((redemption, vec![(Kind::Account, account_id)]))
            })
            .await?;
        Ok(redemption)
    }
}

// === impl EmbeddedStore ===

impl EmbeddedStore {
    /// Applies `f` to the session `id_hash` and writes it back, unless it is
    /// gone or past its expiry.
    async fn change_session(&self, id_hash: &str, f: impl FnOnce(&mut Session) + Send + 'static) -> Result<()> {
        let id_hash = id_hash.to_owned();
        let now = now_unix();
        self.write(move |txn| {
            let mut sessions = txn.open_table(SESSIONS.values).map_err(db_err)?;
            let stored: Option<Session> =
                sessions.get(id_hash.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            if let Some(mut session) = stored.filter(|session| now < session.expires_at) {
                f(&mut session);
                sessions.insert(id_hash.as_str(), encode(&session)?.as_slice()).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }
}

/// Stores `json` under `key` in `tables` until `expires_at` (nothing, and
/// any older value gone, when that is past), after pruning a batch of what
/// expired by the expiry index.
fn put_expiring(
    txn: &WriteTransaction,
    tables: &Expiring,
    key: &str,
    expires_at: i64,
    json: &[u8],
    now: i64,
) -> Result<()> {
    let mut table = txn.open_table(tables.values).map_err(db_err)?;
    let mut expiry = txn.open_table(tables.expiry).map_err(db_err)?;
    for _ in 0..PRUNE_BATCH {
        let Some((at, pruned)) = expiry.first().map_err(db_err)?.map(|(k, _)| {
            let (at, pruned) = k.value();
            (at, pruned.to_owned())
        }) else {
            break;
        };
        if at > now {
            break;
        }
        expiry.remove((at, pruned.as_str())).map_err(db_err)?;
        // The key may have been stored again since, with a later expiry.
        let stored =
            table.get(pruned.as_str()).map_err(db_err)?.map(|json| decode::<Expiry>(json.value())).transpose()?;
        if stored.is_some_and(|stored| stored.expires_at <= now) {
            table.remove(pruned.as_str()).map_err(db_err)?;
        }
    }
    if expires_at <= now {
        table.remove(key).map_err(db_err)?;
        return Ok(());
    }
    table.insert(key, json).map_err(db_err)?;
    expiry.insert((expires_at, key), ()).map_err(db_err)?;
    Ok(())
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
