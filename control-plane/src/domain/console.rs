//! The console's state, as stored: users who sign in with a password (each
//! holding one of the existing roles), their sessions, one-time links that
//! set a password, and top-up codes an account owner redeems for balance.
//! Secrets are never stored: passwords as argon2id hashes, session ids,
//! link tickets and codes as SHA-256 hashes.

use serde::{Deserialize, Serialize};

use super::access::Role;

/// A person who signs in to the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// `usr_…`; the audit log's actor for the user's writes.
    pub id: String,
    /// The sign-in name, unique, lower case.
    pub name: String,
    pub role: Role,
    /// The account of an `Account` user; empty for the other roles.
    pub account_id: String,
    /// The argon2id hash in PHC form; empty until the user sets a password
    /// through an invite or reset link.
    pub password_hash: String,
    /// `enabled` or `disabled`.
    pub status: String,
    pub created_at: i64,
    /// Raised by a password reset, a disable and "sign out everywhere":
    /// sessions opened at a lower epoch are no longer valid.
    pub epoch: u64,
    /// Last successful sign-in; 0 for never. Written on its own
    /// (`ConsoleStore::touch_user`), so it never undoes an epoch raise.
    #[serde(default)]
    pub last_login_at: i64,
}

/// A signed-in browser. Found by the hash of the cookie's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Lowercase hex SHA-256 of the cookie's value.
    pub id_hash: String,
    pub user_id: String,
    /// The user's epoch when the session opened.
    pub epoch: u64,
    /// The token every write form and request must carry (CSRF).
    pub csrf: String,
    pub created_at: i64,
    /// Last request seen (kept to the minute), for the idle expiry.
    pub last_seen_at: i64,
    /// The absolute expiry; the store forgets the session after it.
    pub expires_at: i64,
    /// The key of the session's playground token, once the playground was
    /// used; empty before. Lives and dies with the session.
    #[serde(default)]
    pub playground_key: String,
}

/// What a one-time link is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TicketPurpose {
    /// Creates the first admin; only while no admin user exists.
    Setup,
    /// Sets the first password of an invited user.
    Invite,
    /// Sets a new password of an existing user.
    Reset,
}

/// A one-time link's ticket: redeemable once, until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// Lowercase hex SHA-256 of the link's secret.
    pub hash: String,
    pub purpose: TicketPurpose,
    /// The user it sets a password for; empty for `Setup`.
    pub user_id: String,
    pub expires_at: i64,
}

/// A top-up code's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeStatus {
    Active,
    Redeemed,
    Revoked,
}

/// A code worth `amount_micros` of balance to the first account that
/// redeems it before `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopupCode {
    /// `tpc_…`.
    pub id: String,
    /// Lowercase hex SHA-256 of the code; unique.
    pub code_hash: String,
    /// Display form: enough to recognise the code, too little to use it.
    pub prefix: String,
    pub amount_micros: i64,
    pub created_at: i64,
    /// 0: never expires.
    pub expires_at: i64,
    /// The actor that minted it (credential or user id).
    pub created_by: String,
    pub status: CodeStatus,
    /// The account that redeemed it; empty before.
    #[serde(default)]
    pub redeemed_by: String,
    #[serde(default)]
    pub redeemed_at: i64,
    #[serde(default)]
    pub revoked_at: i64,
}

/// What redeeming a code did.
#[derive(Debug, Clone, PartialEq)]
pub enum Redemption {
    /// The code was active: it is now redeemed by the account, whose balance
    /// rose by its amount in the same atomic write.
    Credited {
        code: TopupCode,
        balance_micros: i64,
    },
    /// No code has the hash.
    Unknown,
    /// Redeemed before (by this or another account).
    Used,
    Revoked,
    Expired,
    /// The account does not exist.
    NoAccount,
}

// === impl TopupCode ===

impl TopupCode {
    /// Whether it can still be redeemed at `now`.
    pub fn redeemable(&self, now: i64) -> bool {
        self.status == CodeStatus::Active && (self.expires_at == 0 || now < self.expires_at)
    }
}

// === impl Session ===

impl Session {
    /// Whether it is past its absolute expiry, or idle for longer than
    /// `idle_secs`, at `now`.
    pub fn expired(&self, now: i64, idle_secs: i64) -> bool {
        now >= self.expires_at || now - self.last_seen_at >= idle_secs
    }
}
