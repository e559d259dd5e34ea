//! Files and batches as handlers see them: what the control plane, their
//! authority, keeps of each, and what the data plane asks it to record.
//! The calls that record and read them are `control::Batches`.

use serde_json::Value;

/// A file of the caller's account, kept on one channel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct File {
    pub id: String,
    pub channel_id: String,
    pub upstream_id: String,
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    pub created_at: i64,
    pub model: String,
    pub endpoint: String,
}

/// A batch of the caller's account.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    pub id: String,
    pub model: String,
    pub channel_id: String,
    pub upstream_id: String,
    pub status: String,
    pub ended: bool,
    /// The object clients see (the upstream's, with our ids).
    pub object: Value,
}

/// The most an upload's lines can count, in tokens, and how many there are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bound {
    pub lines: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// A file the data plane uploaded, to record.
pub struct NewFile<'a> {
    pub channel_id: &'a str,
    pub upstream_id: &'a str,
    pub filename: &'a str,
    pub bytes: i64,
    pub model: &'a str,
    pub endpoint: &'a str,
    pub bound: Bound,
}

/// A batch to create (its bound held) before the upstream sees it.
pub struct NewBatch<'a> {
    pub request_id: &'a str,
    /// `openai` or `anthropic`.
    pub kind: &'a str,
    pub model: &'a str,
    pub channel_id: &'a str,
    /// Our id of the input file (OpenAI), whose bound is the batch's.
    pub input_file_id: &'a str,
    pub endpoint: &'a str,
    pub completion_window: &'a str,
    /// The inline requests' bound (Anthropic).
    pub bound: Bound,
}

/// A page of a listing.
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
}
