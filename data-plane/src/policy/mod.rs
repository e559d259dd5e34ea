//! The policy a data plane enforces, in domain terms: the snapshot of
//! accounts, groups, tokens, channels and models (kept in sync and saved by
//! `control`), the access checks run against it (`auth`, `client_ip`), the
//! shared request-rate limits (`limits`), tokens per minute (`tpm`) and
//! requests in flight (`inflight`), and the spending budgets leased from the
//! control plane (`budget`). Leases come through source traits the control
//! link implements; nothing here names the protocol.

pub mod auth;
pub mod budget;
pub mod client_ip;
pub mod domain;
pub mod inflight;
pub mod limits;
pub mod snapshot;
pub mod tpm;
