//! Files and batch jobs, as the control plane keeps them: which account owns
//! each, the channel that holds it and the upstream's id for it there.
//!
//! A batch is billed once, when it ends: its bound is held at creation
//! (`batch-hold:<id>`), the cost of the lines that completed is charged
//! (`batch:<id>`) and the hold released (`batch-release:<id>`), three usage
//! records the ledger applies once each. Every write of a batch is a
//! compare-and-set on `version`; an ended batch never starts again.

use serde::{Deserialize, Serialize};

/// Which API a batch speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchKind {
    /// `/v1/batches`, over a file of `/v1/files`.
    #[default]
    Openai,
    /// `/v1/messages/batches`, requests inline.
    Anthropic,
}

/// A file of an account, kept on one channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchFile {
    /// Public id (`file-…`), time ordered.
    pub id: String,
    pub account_id: String,
    pub token_id: String,
    pub channel_id: String,
    pub upstream_id: String,
    /// `batch` (uploaded) or `batch_output` (a batch's results or errors).
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    /// Unix seconds.
    pub created_at: i64,
    /// The one model its lines name and their endpoint (uploads only).
    pub model: String,
    pub endpoint: String,
    pub lines: i64,
    /// The most its prompts and completions can count, in tokens.
    pub prompt_tokens_bound: i64,
    pub completion_tokens_bound: i64,
    pub version: u64,
}

/// A batch job of an account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Batch {
    /// Public id (`batch_…` or `msgbatch_…`), time ordered.
    pub id: String,
    pub kind: BatchKind,
    pub account_id: String,
    pub token_id: String,
    pub group: String,
    /// The model its lines name (what is billed).
    pub model: String,
    pub channel_id: String,
    /// Empty until the upstream accepted the batch.
    pub upstream_id: String,
    /// Our id of the input file (OpenAI batches).
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    pub lines: i64,
    /// The upstream's status name (`validating`, `in_progress`, `ended`, …).
    pub status: String,
    /// The batch ended (completed, failed, expired, cancelled): final.
    pub ended: bool,
    /// The upstream's batch object as last seen (JSON).
    pub upstream: String,
    /// Our ids of the files the upstream made of its results (OpenAI), and
    /// the upstream's.
    pub output_file_id: String,
    pub error_file_id: String,
    pub upstream_output_file: String,
    pub upstream_error_file: String,
    /// The bound held at creation, and what the results cost.
    pub hold_micros: i64,
    pub cost_micros: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cached_tokens: i64,
    /// Lines billed (the ones that completed).
    pub billed_lines: i64,
    /// The cost was charged and the hold released.
    pub settled: bool,
    pub error_code: String,
    pub error_message: String,
    /// Unix seconds.
    pub created_at: i64,
    pub updated_at: i64,
    /// Unix milliseconds of the last look at the upstream.
    pub checked_at_ms: i64,
    /// The data plane that took the submission, and its request id.
    pub node_id: String,
    pub request_id: String,
    pub version: u64,
}

// === impl BatchKind ===

impl BatchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchKind::Openai => "openai",
            BatchKind::Anthropic => "anthropic",
        }
    }

    pub fn parse(s: &str) -> Option<BatchKind> {
        [BatchKind::Openai, BatchKind::Anthropic].into_iter().find(|k| k.as_str() == s)
    }

    /// The endpoint its usage records are kept under.
    pub fn endpoint(self) -> &'static str {
        match self {
            BatchKind::Openai => "/v1/batches",
            BatchKind::Anthropic => "/v1/messages/batches",
        }
    }
}

// === impl Batch ===

impl Batch {
    /// Whether the batch still needs the control plane: running, or ended
    /// and not settled. The poller visits exactly these.
    pub fn is_open(&self) -> bool {
        !self.ended || !self.settled
    }
}
