//! Console users, sessions, tickets and top-up codes in the embedded store.
//! PLACEHOLDER: being written; every method panics until then.

use async_trait::async_trait;

use super::EmbeddedStore;
use crate::domain::console::{Redemption, Session, Ticket, TopupCode, User};
use crate::store::Result;
use crate::store::console::ConsoleStore;

#[async_trait]
impl ConsoleStore for EmbeddedStore {
    async fn create_user(&self, _user: &User) -> Result<()> { todo!() }
    async fn get_user(&self, _id: &str) -> Result<Option<User>> { todo!() }
    async fn user_by_name(&self, _name: &str) -> Result<Option<User>> { todo!() }
    async fn list_users(&self) -> Result<Vec<User>> { todo!() }
    async fn put_user(&self, _user: &User) -> Result<()> { todo!() }
    async fn touch_user(&self, _id: &str, _at: i64) -> Result<()> { todo!() }
    async fn put_session(&self, _session: &Session) -> Result<()> { todo!() }
    async fn get_session(&self, _id_hash: &str) -> Result<Option<Session>> { todo!() }
    async fn touch_session(&self, _id_hash: &str, _at: i64) -> Result<()> { todo!() }
    async fn set_playground_key(&self, _id_hash: &str, _key: &str) -> Result<()> { todo!() }
    async fn delete_session(&self, _id_hash: &str) -> Result<()> { todo!() }
    async fn put_ticket(&self, _ticket: &Ticket) -> Result<()> { todo!() }
    async fn take_ticket(&self, _hash: &str) -> Result<Option<Ticket>> { todo!() }
    async fn peek_ticket(&self, _hash: &str) -> Result<Option<Ticket>> { todo!() }
    async fn create_topup_codes(&self, _codes: &[TopupCode]) -> Result<()> { todo!() }
    async fn list_topup_codes(&self) -> Result<Vec<TopupCode>> { todo!() }
    async fn revoke_topup_code(&self, _id: &str, _at: i64) -> Result<TopupCode> { todo!() }
    async fn redeem_topup_code(&self, _code_hash: &str, _account_id: &str, _at: i64) -> Result<Redemption> { todo!() }
}
