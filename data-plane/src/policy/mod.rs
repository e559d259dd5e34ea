//! The policy a data plane enforces and how it gets it: the snapshot of
//! accounts, groups, tokens, channels and models (kept in sync by
//! `discovery`, saved by `persist`), the access checks run against it
//! (`auth`, `client_ip`), the shared request-rate limits (`limits`), tokens
//! per minute (`tpm`) and requests in flight (`inflight`), and the spending
//! budgets leased from the control plane (`budget`).

pub mod auth;
pub mod budget;
pub mod client_ip;
pub mod convert;
pub mod discovery;
pub mod domain;
pub mod inflight;
pub mod limits;
pub mod persist;
pub mod snapshot;
pub mod tpm;
