//! The end-to-end suites, one module each, built as one test binary: every
//! suite links the whole gateway, so one binary instead of one per suite
//! saves a link and about 170 MB of disk a suite. nextest still runs each
//! test in a process of its own.

mod support;

mod admin_writes;
mod agents;
mod batches;
mod budgets;
mod bursts;
mod calendar_budgets;
mod channel_kinds;
mod claude_clouds;
mod config_files;
mod console_admin;
mod console_browser;
mod console_sessions;
mod credentials;
mod declarative;
mod doctor;
mod endpoints;
mod errors;
mod failover;
mod fleet;
mod gateway;
mod gemini_clients;
mod gemini_dialect;
mod health;
mod keepalive;
mod keypools;
mod ledger;
mod logs;
mod messages;
mod prices;
mod providers_azure;
mod providers_bedrock;
mod providers_google;
mod rate_limits;
mod realtime;
mod redis_cluster;
mod replica_failover;
mod rerank;
mod responses_dialect;
mod responses_websocket;
mod sdk_errors;
mod secrets;
mod spool_full_disk;
mod store_conformance;
mod store_loss;
mod stream_crash;
mod telemetry;
mod tls;
mod token_import;
mod token_limits;
mod usage_durability;
mod usage_summary;
mod video;
mod websocket_limits;
