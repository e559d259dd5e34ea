//! What the control plane does, over the store: the usage ledger, budgets
//! and leases, access (credentials, roles, the audit log), the fleet of
//! data planes, the in-memory mirror of policy state, video tasks, files and
//! batches,
//! retention, token import. Each takes and returns domain types and has its
//! own error type; the `api` layer above turns them into gRPC answers.

pub mod access;
pub mod batch;
pub mod budget;
pub mod console;
pub mod continuity;
pub mod fleet;
pub mod health;
pub mod import;
pub mod keys;
pub mod ledger;
pub mod mirror;
pub mod outbound;
pub mod probe;
pub mod retention;
pub mod telemetry;
pub mod usage_summary;
pub mod video;
