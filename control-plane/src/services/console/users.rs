//! Console users: who may sign in, with which role, and their passwords.
//! A user is created without a password and sets one through a one-time
//! link (an invite, a reset, or for the first admin the setup link), so no
//! password is ever chosen by someone else or sent anywhere. Passwords are
//! kept as argon2id hashes; sign-in attempts are counted per user name and
//! per address in the store, so every replica shares the limit.

use std::sync::Arc;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};

use crate::domain::access::Role;
use crate::domain::console::{Ticket, TicketPurpose, User};
use crate::domain::keys::{generate, hash_key, new_id};
use crate::domain::{DISABLED, ENABLED, Kind, Resource, now_unix};
use crate::store::{Store, StoreError};

/// How long an invite or reset link stays usable.
pub const LINK_TTL_SECS: i64 = 7 * 24 * 60 * 60;
/// How long the setup link of a fresh control plane stays usable.
pub const SETUP_TTL_SECS: i64 = 24 * 60 * 60;
/// Shortest password accepted.
pub const MIN_PASSWORD: usize = 10;
const MAX_PASSWORD: usize = 1024;
/// The window sign-in attempts are counted in.
const ATTEMPT_WINDOW_SECS: i64 = 15 * 60;

/// Why a user call is refused.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// The request breaks a rule; the text says which.
    #[error("{0}")]
    Invalid(String),
    #[error("no user is named {0:?}")]
    NoUser(String),
    /// The link is unknown, used or expired.
    #[error("this link is not valid: it was used already, has expired or was replaced by a newer one")]
    BadLink,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a sign-in is refused. The texts are shown on the sign-in page.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// Unknown user, wrong password, no password set yet, or disabled: one
    /// answer for all, so the page tells nobody which names exist.
    #[error("wrong user name or password")]
    Refused,
    #[error("too many sign-in attempts; wait {minutes} minutes and try again")]
    Limited { minutes: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How many sign-in attempts are allowed per window of 15 minutes.
#[derive(Debug, Clone, Copy)]
pub struct AttemptLimits {
    pub per_user: u32,
    pub per_address: u32,
}

/// A one-time link's secret and what it is for; the api layer makes the URL.
#[derive(Debug, Clone)]
pub struct Link {
    pub secret: String,
    pub purpose: TicketPurpose,
    pub expires_at: i64,
}

/// The user calls of one replica.
pub struct Users {
    store: Arc<dyn Store>,
    limits: AttemptLimits,
    /// Hashed when a name is unknown, so that answer takes as long as a
    /// wrong password.
    decoy: String,
}

// === impl Link ===

impl Link {
    /// The link's URL under the console's public `base_url` (a bare path
    /// when the base is empty).
    pub fn url(&self, base_url: &str) -> String {
        format!("{base_url}/welcome?ticket={}", self.secret)
    }
}

// === impl AttemptLimits ===

impl Default for AttemptLimits {
    fn default() -> AttemptLimits {
        AttemptLimits { per_user: 10, per_address: 50 }
    }
}

// === impl Users ===

impl Users {
    pub fn new(store: Arc<dyn Store>, limits: AttemptLimits) -> Users {
        let decoy = hash_password("decoy password never used").unwrap_or_default();
        Users { store, limits, decoy }
    }

    /// Creates user `name` with `role` (an `account` user for `account_id`,
    /// which must exist) and no password, and returns it with the invite
    /// link that sets its password. `Invalid` for a bad name, role or
    /// account; the store's `UserNameTaken` when the name is taken.
    pub async fn invite(&self, name: &str, role: &str, account_id: &str) -> Result<(User, Link), UserError> {
        let name = check_name(name)?;
        let role = Role::parse(role).ok_or_else(|| {
            UserError::Invalid(format!("role {role:?} is not one of admin, operator-readonly, account"))
        })?;
        let account_id = match role {
            Role::Account if account_id.is_empty() => {
                return Err(UserError::Invalid("an account user needs --account".into()));
            }
            Role::Account => {
                if !matches!(self.store.get(Kind::Account, account_id).await?, Some(Resource::Account(_))) {
                    return Err(UserError::Invalid(format!("account {account_id:?} not found")));
                }
                account_id.to_owned()
            }
            _ if !account_id.is_empty() => {
                return Err(UserError::Invalid(format!("only account users belong to an account, not {role}")));
            }
            _ => String::new(),
        };
        let user = User {
            id: new_id("usr"),
            name,
            role,
            account_id,
            password_hash: String::new(),
            status: ENABLED.into(),
            created_at: now_unix(),
            epoch: 1,
            last_login_at: 0,
        };
        self.store.create_user(&user).await?;
        let link = self.link(TicketPurpose::Invite, &user.id, LINK_TTL_SECS).await?;
        Ok((user, link))
    }

    /// Every user, ordered by id.
    pub async fn list(&self) -> Result<Vec<User>, UserError> {
        Ok(self.store.list_users().await?)
    }

    /// The user named `name`; `NoUser` when there is none.
    pub async fn named(&self, name: &str) -> Result<User, UserError> {
        let name = name.trim().to_lowercase();
        self.store.user_by_name(&name).await?.ok_or(UserError::NoUser(name))
    }

    /// The user `id`, or `None`.
    pub async fn get(&self, id: &str) -> Result<Option<User>, UserError> {
        Ok(self.store.get_user(id).await?)
    }

    /// Enables or disables user `name`. Disabling ends its sessions.
    pub async fn set_enabled(&self, name: &str, enabled: bool) -> Result<User, UserError> {
        let mut user = self.named(name).await?;
        let status = if enabled { ENABLED } else { DISABLED };
        if user.status != status {
            user.status = status.into();
            if !enabled {
                user.epoch += 1;
            }
            self.store.put_user(&user).await?;
        }
        Ok(user)
    }

    /// Ends every session of user `id` (its epoch rises).
    pub async fn sign_out_everywhere(&self, id: &str) -> Result<(), UserError> {
        let mut user = self.store.get_user(id).await?.ok_or_else(|| UserError::NoUser(id.to_owned()))?;
        user.epoch += 1;
        self.store.put_user(&user).await?;
        Ok(())
    }

    /// Ends every session of user `name` and returns a link that sets a new
    /// password; the old password keeps working until the link is used.
    pub async fn reset(&self, name: &str) -> Result<(User, Link), UserError> {
        let mut user = self.named(name).await?;
        user.epoch += 1;
        self.store.put_user(&user).await?;
        let link = self.link(TicketPurpose::Reset, &user.id, LINK_TTL_SECS).await?;
        Ok((user, link))
    }

    /// A setup link for the first admin, when no enabled admin user exists;
    /// `None` once one does.
    pub async fn setup_link(&self) -> Result<Option<Link>, UserError> {
        if self.has_admin().await? {
            return Ok(None);
        }
        Ok(Some(self.link(TicketPurpose::Setup, "", SETUP_TTL_SECS).await?))
    }

    /// What the link with `secret` is for, leaving it usable; `BadLink` when
    /// it is not (also a setup link once an admin exists).
    pub async fn check_link(&self, secret: &str) -> Result<(Ticket, Option<User>), UserError> {
        let ticket = self.store.peek_ticket(&hash_key(secret)).await?.ok_or(UserError::BadLink)?;
        self.ticket_user(ticket).await
    }

    /// Uses the link with `secret`: a setup link creates admin `name` with
    /// `password`; an invite or reset link sets the password of its user
    /// (`name` is ignored). The link is used up even when the password is
    /// refused, so check the password first (`check_password`).
    pub async fn use_link(&self, secret: &str, name: &str, password: &str) -> Result<User, UserError> {
        check_password(password)?;
        let peeked = self.store.peek_ticket(&hash_key(secret)).await?.ok_or(UserError::BadLink)?;
        if peeked.purpose == TicketPurpose::Setup {
            check_name(name)?;
        }
        let hash = hash_password(password)?;
        let ticket = self.store.take_ticket(&hash_key(secret)).await?.ok_or(UserError::BadLink)?;
        let (ticket, user) = self.ticket_user(ticket).await?;
        match (ticket.purpose, user) {
            (TicketPurpose::Setup, _) => {
                let user = User {
                    id: new_id("usr"),
                    name: check_name(name)?,
                    role: Role::Admin,
                    account_id: String::new(),
                    password_hash: hash,
                    status: ENABLED.into(),
                    created_at: now_unix(),
                    epoch: 1,
                    last_login_at: 0,
                };
                self.store.create_user(&user).await?;
                Ok(user)
            }
            (_, Some(mut user)) => {
                user.password_hash = hash;
                user.epoch += 1;
                self.store.put_user(&user).await?;
                Ok(user)
            }
            (_, None) => Err(UserError::BadLink),
        }
    }

    /// The user `name` when `password` is theirs and they may sign in, from
    /// `address`. Every attempt counts against the per-user and per-address
    /// limits; past either, `Limited` without looking at the password.
    pub async fn sign_in(&self, name: &str, password: &str, address: &str) -> Result<User, LoginError> {
        let name = name.trim().to_lowercase();
        let now = now_unix();
        let window = now - now.rem_euclid(ATTEMPT_WINDOW_SECS);
        let minutes = (window + ATTEMPT_WINDOW_SECS - now + 59) / 60;
        for (key, limit) in [
            (format!("console-login:user:{}", hash_key(&name)), self.limits.per_user),
            (format!("console-login:addr:{address}"), self.limits.per_address),
        ] {
            if self.store.take_permits(&key, window, ATTEMPT_WINDOW_SECS, limit, 1).await? == 0 {
                tracing::warn!(address, "console sign-in attempts limited");
                return Err(LoginError::Limited { minutes });
            }
        }
        let user = self.store.user_by_name(&name).await?;
        let stored = user.as_ref().map_or(self.decoy.as_str(), |user| user.password_hash.as_str());
        let matches = verify_password(stored, password);
        match user {
            Some(user) if matches && user.status == ENABLED && !user.password_hash.is_empty() => {
                if let Err(error) = self.store.touch_user(&user.id, now).await {
                    tracing::warn!(%error, user = %user.id, "could not record a sign-in");
                }
                Ok(user)
            }
            _ => Err(LoginError::Refused),
        }
    }

    async fn has_admin(&self) -> Result<bool, UserError> {
        let users = self.store.list_users().await?;
        Ok(users.iter().any(|user| user.role == Role::Admin && user.status == ENABLED))
    }

    async fn link(&self, purpose: TicketPurpose, user_id: &str, ttl: i64) -> Result<Link, UserError> {
        let secret = generate("");
        let expires_at = now_unix() + ttl;
        let ticket = Ticket { hash: hash_key(&secret), purpose, user_id: user_id.to_owned(), expires_at };
        self.store.put_ticket(&ticket).await?;
        Ok(Link { secret, purpose, expires_at })
    }

    async fn ticket_user(&self, ticket: Ticket) -> Result<(Ticket, Option<User>), UserError> {
        if ticket.purpose == TicketPurpose::Setup {
            return if self.has_admin().await? { Err(UserError::BadLink) } else { Ok((ticket, None)) };
        }
        let user = self.store.get_user(&ticket.user_id).await?.ok_or(UserError::BadLink)?;
        Ok((ticket, Some(user)))
    }
}

/// A sign-in name: 1 to 64 of `a-z 0-9 . _ @ -`, lower-cased.
pub fn check_name(name: &str) -> Result<String, UserError> {
    let name = name.trim().to_lowercase();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-');
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(UserError::Invalid(format!("user name {name:?} must be 1 to 64 letters, digits or . _ @ -")));
    }
    Ok(name)
}

/// Refuses a password shorter than `MIN_PASSWORD` characters.
pub fn check_password(password: &str) -> Result<(), UserError> {
    let len = password.chars().count();
    if len < MIN_PASSWORD {
        return Err(UserError::Invalid(format!("the password must be at least {MIN_PASSWORD} characters long")));
    }
    if len > MAX_PASSWORD {
        return Err(UserError::Invalid(format!("the password must be at most {MAX_PASSWORD} characters long")));
    }
    Ok(())
}

/// The argon2id hash of `password` (PHC form, random salt).
fn hash_password(password: &str) -> Result<String, UserError> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>())
        .map_err(|error| UserError::Invalid(format!("could not salt the password: {error}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| UserError::Invalid(format!("could not hash the password: {error}")))
}

/// Whether `password` matches the PHC hash `stored`; false for an empty or
/// malformed hash.
fn verify_password(stored: &str, password: &str) -> bool {
    PasswordHash::new(stored).is_ok_and(|hash| Argon2::default().verify_password(password.as_bytes(), &hash).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_with_argon2id_and_verify() {
        let hash = hash_password("correct horse battery").expect("hash");
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password(&hash, "correct horse battery"));
        assert!(!verify_password(&hash, "correct horse battery!"));
        assert!(!verify_password("", "anything"), "no password set");
        assert_ne!(hash, hash_password("correct horse battery").expect("hash"), "salted");
    }

    #[test]
    fn names_and_passwords_follow_the_rules() {
        assert_eq!(check_name(" Alice@Example.com ").expect("name"), "alice@example.com");
        assert!(check_name("").is_err() && check_name("a b").is_err() && check_name(&"a".repeat(65)).is_err());
        assert!(check_password("short").is_err());
        assert!(check_password("long enough!").is_ok());
    }
}
