//! The store's part of the console: users (by id and by unique name),
//! sessions and one-time tickets (each forgotten after its expiry), and
//! top-up codes (by id and by unique code hash), whose redemption credits
//! the account's balance in the same atomic write, so a code pays exactly
//! once however many replicas race for it. None of it bumps the policy
//! revision except a redemption's balance change.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;

use super::Result;
use crate::domain::console::{Redemption, Session, Ticket, TopupCode, User};

/// Console users, sessions, tickets and top-up codes. Every `Store` is one.
#[async_trait]
pub trait ConsoleStore: Send + Sync {
    /// Stores a new user; `UserExists` when its id is taken and `UserNameTaken`
    /// when its name is, atomically.
    async fn create_user(&self, user: &User) -> Result<()>;

    /// One user, or `None`.
    async fn get_user(&self, id: &str) -> Result<Option<User>>;

    /// The user named `name`, or `None`.
    async fn user_by_name(&self, name: &str) -> Result<Option<User>>;

    /// Every user, ordered by id.
    async fn list_users(&self) -> Result<Vec<User>>;

    /// Replaces stored user `user.id` (same name; `last_login_at` keeps its
    /// stored value); `NoUser` when absent.
    async fn put_user(&self, user: &User) -> Result<()>;

    /// Records a successful sign-in of user `id` at `at`; nothing when gone.
    async fn touch_user(&self, id: &str, at: i64) -> Result<()>;

    /// Stores a session until its `expires_at`.
    async fn put_session(&self, session: &Session) -> Result<()>;

    /// The session whose id hashes to `id_hash`, or `None` (also once past its
    /// `expires_at`).
    async fn get_session(&self, id_hash: &str) -> Result<Option<Session>>;

    /// Sets a session's `last_seen_at`; nothing when gone.
    async fn touch_session(&self, id_hash: &str, at: i64) -> Result<()>;

    /// Sets a session's playground key; nothing when gone.
    async fn set_playground_key(&self, id_hash: &str, key: &str) -> Result<()>;

    /// Forgets a session; nothing when gone.
    async fn delete_session(&self, id_hash: &str) -> Result<()>;

    /// Stores a ticket until its `expires_at`.
    async fn put_ticket(&self, ticket: &Ticket) -> Result<()>;

    /// Removes and returns the ticket with `hash`, atomically, so one ticket
    /// is taken once; `None` when unknown, taken or past `expires_at`.
    async fn take_ticket(&self, hash: &str) -> Result<Option<Ticket>>;

    /// The ticket with `hash`, left in place; `None` as for `take_ticket`.
    async fn peek_ticket(&self, hash: &str) -> Result<Option<Ticket>>;

    /// Stores new codes in one atomic write; `CodeExists` (writing none) when
    /// an id or code hash is taken.
    async fn create_topup_codes(&self, codes: &[TopupCode]) -> Result<()>;

    /// Every code, ordered by id.
    async fn list_topup_codes(&self) -> Result<Vec<TopupCode>>;

    /// Marks an active code revoked at `at` and returns it; `NoCode` when
    /// absent, `Rejected` when it was redeemed. Revoking twice is no error.
    async fn revoke_topup_code(&self, id: &str, at: i64) -> Result<TopupCode>;

    /// Redeems the code with `code_hash` for `account_id` at `at`: when it is
    /// redeemable, marks it redeemed by the account and adds its amount to the
    /// account's balance in one atomic write (bumping the revision and the
    /// change feed, like any balance change). Otherwise changes nothing and
    /// says why.
    async fn redeem_topup_code(&self, code_hash: &str, account_id: &str, at: i64) -> Result<Redemption>;
}
