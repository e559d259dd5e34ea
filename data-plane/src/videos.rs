//! Video tasks as handlers see them: the task the control plane, their
//! authority, keeps, and what the data plane asks to create. The calls
//! that create, record and read them are `control::Videos`.

use serde_json::{Map, Value};

/// A video task as the control plane reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Task {
    pub id: String,
    pub model: String,
    pub channel_id: String,
    pub upstream_id: String,
    /// queued, in_progress, completed or failed.
    pub status: String,
    pub progress: u32,
    pub seconds: u32,
    pub size: String,
    pub created_at: i64,
    pub completed_at: i64,
    pub error_code: String,
    pub error_message: String,
    /// The upstream's other fields.
    pub extra: Map<String, Value>,
}

/// What the data plane asks to create.
pub struct NewTask<'a> {
    pub request_id: &'a str,
    pub model: &'a str,
    pub channel_id: &'a str,
    pub seconds: u32,
    pub size: &'a str,
}
