//! The budget step, after routing and before any upstream attempt: the
//! request's token bound is reserved under its tokens-per-minute limits
//! (`policy::tpm`) and its bounded cost from the budgets this data plane
//! holds (`policy::budget`); the `Charge` that meters it carries both
//! reservations so that the real usage settles them.

use std::sync::{Arc, PoisonError};

use super::{Admitted, App};
use crate::{
    error::ProxyError,
    meter::Charge,
    policy::domain::Model,
    pricing::{Units, bound_micros, units_cost_micros},
};

/// What a request may cost at most, as far as it is known before sending:
/// the prompt (estimated from the body's size, 4 bytes a token), the output
/// bound the client set, and the units priced apart.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bound {
    pub body_bytes: usize,
    /// `max_tokens` and the like; `None` reserves the configured default.
    pub max_output_tokens: Option<i64>,
    pub units: Units,
}

/// Reserves `bound`'s cost for `admitted`'s request to `endpoint` and
/// returns its charge. Fails with the catalogue's 403 when the token's quota
/// or the account's balance cannot cover it, 503 when the budget authority
/// is unreachable and what is held does not, and 503 while usage records
/// cannot be written to the spool (an answer that could not be billed is
/// never sent).
pub async fn reserve(
    app: &App,
    admitted: &Admitted,
    model: Arc<Model>,
    endpoint: &'static str,
    bound: Bound,
) -> Result<Charge, ProxyError> {
    if !app.usage.writable() {
        return Err(ProxyError::SpoolUnwritable);
    }
    let charge = admitted.charge(model, endpoint);
    let output = bound.max_output_tokens.unwrap_or(app.budgets.config().default_max_output_tokens);
    let prompt_tokens = i64::try_from(bound.body_bytes.div_ceil(4)).unwrap_or(i64::MAX);
    let output = output.max(0);
    // The highest rates either tier may charge: the estimate may be under
    // the tier's threshold when the real prompt is not, and any part of the
    // prompt may be a cache write, any part of the output reasoning.
    let amount = bound_micros(prompt_tokens, output, &charge.model, charge.ratio_ppm)
        .saturating_add(units_cost_micros(&bound.units, &charge.model, charge.ratio_ppm));
    // Tokens first: a request refused for its tokens holds no budget.
    let tokens = app.limits.reserve_tokens(&admitted.caller, prompt_tokens.saturating_add(output)).await?;
    let reservation = app.budgets.reserve(&admitted.caller, amount, admitted.snapshot.revision).await?;
    *charge.reservation.lock().unwrap_or_else(PoisonError::into_inner) = Some(reservation);
    *charge.tokens.lock().unwrap_or_else(PoisonError::into_inner) = Some(tokens);
    Ok(charge)
}

impl Bound {
    /// A token-priced request of `body_bytes` with output bound `max_output_tokens`.
    pub fn tokens(body_bytes: usize, max_output_tokens: Option<i64>) -> Bound {
        Bound { body_bytes, max_output_tokens, units: Units::default() }
    }
}
