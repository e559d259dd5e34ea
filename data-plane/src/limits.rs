//! Rate limits (429): the step between authorization and body parsing.
//! Not enforced yet; the control plane's lease-based budgets plug in here.

use crate::{auth::Caller, error::ProxyError};

/// Admits or refuses `caller`'s request under its token's and group's rate
/// limits. Always admits for now.
pub fn check(caller: &Caller) -> Result<(), ProxyError> {
    let _ = caller;
    Ok(())
}
