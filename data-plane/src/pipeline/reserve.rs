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
    let (bound_tokens, amount) = bound.cost(app, &charge);
    // Tokens first: a request refused for its tokens holds no budget.
    let tokens = app.limits.reserve_tokens(&admitted.caller, bound_tokens).await?;
    let reservation = app.budgets.reserve(&admitted.caller, amount, admitted.snapshot.revision).await?;
    *charge.reservation.lock().unwrap_or_else(PoisonError::into_inner) = Some(reservation);
    *charge.tokens.lock().unwrap_or_else(PoisonError::into_inner) = Some(tokens);
    Ok(charge)
}

/// Reserves `bound`'s cost once more for a further part of the session
/// `charge` bills (the next response of a realtime session), from the
/// budgets only: the session already holds its rate, tokens and in-flight
/// permits. Returns a copy of `charge` holding the new reservation; fails
/// as `reserve` does when the budgets cannot cover it.
pub async fn reserve_again(
    app: &App,
    admitted: &Admitted,
    charge: &Charge,
    bound: Bound,
) -> Result<Charge, ProxyError> {
    if !app.usage.writable() {
        return Err(ProxyError::SpoolUnwritable);
    }
    let (_, amount) = bound.cost(app, charge);
    let reservation = app.budgets.reserve(&admitted.caller, amount, admitted.snapshot.revision).await?;
    Ok(Charge {
        reservation: Arc::new(std::sync::Mutex::new(Some(reservation))),
        tokens: Arc::default(),
        ..charge.clone()
    })
}

impl Bound {
    /// The tokens this bound allows and the most they can cost on
    /// `charge`'s model and ratio.
    fn cost(&self, app: &App, charge: &Charge) -> (i64, i64) {
        let output = self.max_output_tokens.unwrap_or(app.budgets.config().default_max_output_tokens).max(0);
        let prompt_tokens = i64::try_from(self.body_bytes.div_ceil(4)).unwrap_or(i64::MAX);
        // The highest rates either tier may charge: the estimate may be under
        // the tier's threshold when the real prompt is not, and any part of the
        // prompt may be a cache write, any part of the output reasoning.
        let amount = bound_micros(prompt_tokens, output, &charge.model, charge.ratio_ppm)
            .saturating_add(units_cost_micros(&self.units, &charge.model, charge.ratio_ppm));
        (prompt_tokens.saturating_add(output), amount)
    }

    /// A token-priced request of `body_bytes` with output bound `max_output_tokens`.
    pub fn tokens(body_bytes: usize, max_output_tokens: Option<i64>) -> Bound {
        Bound { body_bytes, max_output_tokens, units: Units::default() }
    }
}
