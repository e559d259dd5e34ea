//! The two steps video tasks and batches share with the control plane: a
//! create that charges the caller first (its refusal is the caller's 403),
//! and the record of what the upstream made of the submission, resent until
//! the control plane takes it (the upstream already acted on it).

use std::{future::Future, time::Duration};

use tonic::Status;

use super::is_retryable;
use crate::error::ProxyError;

/// Attempts at recording the upstream's answer.
const RECORD_ATTEMPTS: u32 = 3;

/// The created object of a charging create, or the 403 that the control
/// plane's `refused` reason (`token_quota`, `user_quota`) means; `what`
/// names the object in the log when the answer holds neither.
pub fn charged<T>(refused: &str, created: Option<T>, balance_micros: i64, what: &str) -> Result<T, ProxyError> {
    match (refused, created) {
        ("token_quota", _) => Err(ProxyError::TokenQuotaExhausted),
        ("user_quota", _) => Err(ProxyError::InsufficientUserQuota { balance_micros }),
        ("", Some(created)) => Ok(created),
        (other, _) => {
            tracing::error!(refused = other, what, "control plane answered a create with nothing usable");
            Err(ProxyError::Internal)
        }
    }
}

/// Runs `send` until it succeeds, fails with an error that is not
/// retryable, or `RECORD_ATTEMPTS` tries were made, waiting a little longer
/// after each; returns the last outcome.
pub async fn recorded<T, F, Fut>(what: &str, id: &str, mut send: F) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut attempt = 1;
    loop {
        match send().await {
            Err(status) if attempt < RECORD_ATTEMPTS && is_retryable(&status) => {
                tracing::warn!(what, id, %status, "recording an upstream submission failed; retrying");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}
