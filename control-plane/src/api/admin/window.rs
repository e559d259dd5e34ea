//! Window budgets in admin answers: what was spent in the current window,
//! what is left of it and when it resets, computed when answering.

use gw_proto::pb;
use tonic::Status;

use super::AdminApi;
use crate::{
    api::convert,
    domain::calendar::rfc3339_in,
    domain::clock::Clock,
    domain::{Account, Token, WindowBudget},
    store::Budget,
};

// === impl AdminApi ===

impl AdminApi {
    /// Answers window budgets by `clock` (the system clock by default).
    pub fn with_clock(mut self, clock: Clock) -> AdminApi {
        self.clock = clock;
        self
    }

    /// Writes window budgets without a zone in `zone` (UTC by default).
    pub fn with_time_zone(mut self, zone: String) -> AdminApi {
        self.time_zone = zone;
        self
    }

    /// The window budget a write asks for: `None` to leave it, `Some(None)`
    /// to remove it. Refuses a bad one with a clear message.
    pub(super) fn requested_window(
        &self,
        window: Option<pb::WindowBudget>,
    ) -> Result<Option<Option<WindowBudget>>, Status> {
        let budget =
            |w| convert::window_budget(w, &self.time_zone).map_err(|e| Status::invalid_argument(e.to_string()));
        window.map(budget).transpose()
    }

    /// `account` as answered, its window's standing filled in.
    pub(super) async fn account_answer(&self, account: Account) -> Result<pb::Account, Status> {
        let (budget, window) = (Budget::Account(account.id.clone()), account.window.clone());
        let mut answer: pb::Account = account.into();
        self.fill_window(&budget, window.as_ref(), answer.window.as_mut()).await?;
        Ok(answer)
    }

    /// `token` as answered, its window's standing filled in.
    pub(super) async fn token_answer(&self, token: Token) -> Result<pb::Token, Status> {
        let (budget, window) = (Budget::Token(token.id.clone()), token.window.clone());
        let mut answer: pb::Token = token.into();
        self.fill_window(&budget, window.as_ref(), answer.window.as_mut()).await?;
        Ok(answer)
    }

    async fn fill_window(
        &self,
        budget: &Budget,
        window: Option<&WindowBudget>,
        answer: Option<&mut pb::WindowBudget>,
    ) -> Result<(), Status> {
        let (Some(window), Some(answer)) = (window, answer) else {
            return Ok(());
        };
        let current = window.window_at(self.clock.now()).map_err(|e| Status::internal(e.to_string()))?;
        let spent = self.store.window_spent(budget, &current.buckets).await?;
        answer.used_micros = spent;
        answer.remaining_micros = window.quota_micros.saturating_sub(spent).max(0);
        answer.window_start = rfc3339_in(current.start, &window.time_zone);
        answer.resets_at = rfc3339_in(current.end, &window.time_zone);
        Ok(())
    }
}
