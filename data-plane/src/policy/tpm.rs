//! Tokens-per-minute limits, per token and per group × account: a request
//! reserves its token bound (estimated prompt tokens + max output tokens)
//! before it is forwarded and settles with the tokens it really used.
//!
//! The units come from the rate limiter's pools, leased per one-minute
//! window by the control plane, which never grants more than the limit in a
//! window. Settling gives the unused part back to this data plane's pool
//! while the window lasts; an overrun (a prompt longer than estimated) is
//! taken from the pool and what the pool lacks is charged to the control
//! plane's current window, past the limit if need be, so that window grants
//! that much less. Bound: the reservations admitted across the fleet in a
//! window never exceed the limit M; tokens really used by requests admitted
//! in a window exceed M by at most their overruns, and each overrun lowers
//! what is granted afterwards. A request whose bound alone exceeds M is
//! always refused. Without the control plane each data plane counts locally
//! against the full limit, as request limits do (N data planes: N × M).

use crate::{
    error::ProxyError,
    policy::auth::Caller,
    policy::domain::RateLimit,
    policy::limits::{Counted, Limiter},
};

/// Units taken for one request; settled by `settle`, or given back whole
/// when dropped unsettled (nothing was sent upstream).
pub struct TokenReservation {
    limiter: Option<Limiter>,
    limits: Vec<(String, RateLimit)>,
    windows: Vec<i64>,
    units: u32,
}

// === impl Limiter ===

impl Limiter {
    /// Reserves `units` tokens under `caller`'s tokens-per-minute limits
    /// (token's and group's, all or none). Fails with the 429 when a window
    /// has not that many left; may wait for a lease like `check`.
    pub async fn reserve_tokens(&self, caller: &Caller, units: i64) -> Result<TokenReservation, ProxyError> {
        let limits = applicable(caller);
        if limits.is_empty() {
            return Ok(TokenReservation::none());
        }
        let units = u32::try_from(units.max(0)).unwrap_or(u32::MAX);
        let windows = self.admit(&limits, units, Counted::Tokens).await?;
        Ok(TokenReservation { limiter: Some(self.clone()), limits, windows, units })
    }
}

// === impl TokenReservation ===

impl TokenReservation {
    /// A reservation under no limit.
    pub fn none() -> TokenReservation {
        TokenReservation { limiter: None, limits: Vec::new(), windows: Vec::new(), units: 0 }
    }

    /// The request used `tokens` (input + output): the rest goes back, an
    /// overrun is charged.
    pub fn settle(mut self, tokens: i64) {
        self.finish(u32::try_from(tokens.max(0)).unwrap_or(u32::MAX));
    }

    fn finish(&mut self, used: u32) {
        if let Some(limiter) = self.limiter.take() {
            limiter.settle(&self.limits, &self.windows, self.units, used);
        }
    }
}

impl Drop for TokenReservation {
    fn drop(&mut self) {
        self.finish(0);
    }
}

impl std::fmt::Debug for TokenReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReservation").field("limits", &self.limits).field("units", &self.units).finish()
    }
}

/// The tokens-per-minute limits of `caller` with their keys: the token's,
/// then the group's (per account), as one-minute windows.
fn applicable(caller: &Caller) -> Vec<(String, RateLimit)> {
    let per_minute = |max_requests| RateLimit { window_minutes: 1, max_requests };
    let mut limits = Vec::with_capacity(2);
    let tokens_per_minute = caller.token.restrictions().tokens_per_minute;
    if tokens_per_minute > 0 {
        limits.push((["tpm:token:", &caller.token.id].concat(), per_minute(tokens_per_minute)));
    }
    if caller.group.tokens_per_minute > 0 {
        let key = format!("tpm:group:{}:{}", caller.group.name, caller.account.id);
        limits.push((key, per_minute(caller.group.tokens_per_minute)));
    }
    limits
}
