//! What the control plane asks a channel about a video task, and how an
//! upstream's task object is read: `GET {base}/videos/{id}` with the
//! channel's key; status names of the OpenAI API and the common native ones
//! (`processing`, `succeeded`, …) are understood; fields the gateway does not
//! own are kept to be passed through to clients.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Map, Value};

use super::fail;
use crate::domain::{Channel, VideoStatus, VideoTask};
use crate::services::outbound::{describe, path_segment};

/// Fields the gateway sets itself in the task objects clients see.
const OWNED: [&str; 10] =
    ["id", "task_id", "object", "model", "status", "progress", "seconds", "created_at", "completed_at", "error"];
/// Largest pass-through object kept with a task.
const MAX_EXTRA_BYTES: usize = 16 << 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP client for upstream status queries.
pub struct Upstream {
    http: reqwest::Client,
}

/// Why a status query gave no answer.
#[derive(Debug)]
pub enum FetchError {
    /// The upstream answered 404: it does not know the task.
    NotFound,
    /// Anything else; the reason is free of secrets.
    Failed(String),
}

/// What an upstream task object says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    pub upstream_id: Option<String>,
    pub status: Option<VideoStatus>,
    pub progress: Option<u32>,
    pub completed_at: Option<i64>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// JSON object of the other fields, or empty.
    pub extra: String,
}

// === impl Upstream ===

impl Upstream {
    pub fn new() -> anyhow::Result<Upstream> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .build()
            .context("building the upstream HTTP client")?;
        Ok(Upstream { http })
    }

    /// The upstream's view of task `upstream_id` on `channel`.
    pub async fn status(&self, channel: &Channel, upstream_id: &str) -> Result<Observation, FetchError> {
        let url = format!("{}/videos/{}", channel.base_url.trim_end_matches('/'), path_segment(upstream_id));
        let response = self
            .http
            .get(url)
            .bearer_auth(channel.first_key())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| FetchError::Failed(describe(&error)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(FetchError::NotFound);
        }
        if !status.is_success() {
            return Err(FetchError::Failed(format!("upstream answered {status}")));
        }
        let body: Value = response.json().await.map_err(|error| FetchError::Failed(describe(&error)))?;
        if !body.is_object() {
            return Err(FetchError::Failed("upstream answer is not a JSON object".into()));
        }
        Ok(Observation::parse(&body))
    }
}

// === impl Observation ===

impl Observation {
    /// Reads an upstream task object (anything else reads as empty).
    pub fn parse(body: &Value) -> Observation {
        let Some(object) = body.as_object() else { return Observation::default() };
        let upstream_id =
            ["id", "task_id"].iter().find_map(|k| object.get(*k)).and_then(scalar_text).filter(|s| !s.is_empty());
        let status = object.get("status").and_then(Value::as_str).and_then(parse_status);
        let progress = object.get("progress").and_then(parse_progress);
        let completed_at = object.get("completed_at").and_then(Value::as_i64).filter(|t| *t > 0);
        let (mut error_code, mut error_message) = (None, None);
        match object.get("error") {
            Some(Value::Object(error)) => {
                error_code = error.get("code").and_then(scalar_text);
                error_message = error.get("message").and_then(Value::as_str).map(str::to_owned);
            }
            Some(Value::String(message)) if !message.is_empty() => error_message = Some(message.clone()),
            _ => {}
        }
        if error_message.is_none() {
            error_message = object.get("fail_reason").and_then(Value::as_str).filter(|s| !s.is_empty()).map(Into::into);
        }
        let extra: Map<String, Value> =
            object.iter().filter(|(k, _)| !OWNED.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
        let extra = match serde_json::to_string(&extra) {
            Ok(text) if !extra.is_empty() && text.len() <= MAX_EXTRA_BYTES => text,
            _ => String::new(),
        };
        Observation { upstream_id, status, progress, completed_at, error_code, error_message, extra }
    }

    /// Moves `task` to what was observed at `now_ms`: forward only (a task
    /// never goes back to queued, progress never drops), terminal states
    /// final. Returns whether the task is to be written (it is, whenever
    /// it is not terminal: the time of the look is recorded).
    pub fn apply(&self, task: &mut VideoTask, now_ms: i64) -> bool {
        if task.status.is_terminal() {
            return false;
        }
        if self.status == Some(VideoStatus::Failed) {
            let code = self.error_code.as_deref().unwrap_or("upstream_failed");
            let message = self.error_message.as_deref().unwrap_or("the upstream failed to generate the video");
            if !self.extra.is_empty() {
                task.extra.clone_from(&self.extra);
            }
            return fail(task, code, message, now_ms);
        }
        let before = (task.status, task.progress);
        task.checked_at_ms = now_ms;
        if !self.extra.is_empty() {
            task.extra.clone_from(&self.extra);
        }
        match self.status {
            Some(VideoStatus::Completed) => {
                task.status = VideoStatus::Completed;
                task.progress = 100;
                task.completed_at = self.completed_at.unwrap_or(now_ms / 1000);
            }
            Some(VideoStatus::InProgress) => task.status = VideoStatus::InProgress,
            _ => {}
        }
        if task.status != VideoStatus::Completed
            && let Some(progress) = self.progress
        {
            // 100 is for completed tasks only.
            task.progress = task.progress.max(progress.min(99));
        }
        if (task.status, task.progress) != before {
            task.updated_at = now_ms / 1000;
        }
        true
    }
}

/// A status name of the OpenAI API or of a common native API.
pub fn parse_status(name: &str) -> Option<VideoStatus> {
    Some(match name.to_ascii_lowercase().as_str() {
        "queued" | "pending" | "submitted" | "not_start" | "waiting" => VideoStatus::Queued,
        "in_progress" | "processing" | "running" | "generating" | "started" => VideoStatus::InProgress,
        "completed" | "succeeded" | "success" | "done" | "finished" => VideoStatus::Completed,
        "failed" | "failure" | "error" | "cancelled" | "canceled" | "expired" => VideoStatus::Failed,
        _ => return None,
    })
}

/// A progress number, or a text such as `"45%"`, clamped to 0–100.
fn parse_progress(value: &Value) -> Option<u32> {
    let number = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse().ok()?,
        _ => return None,
    };
    Some(number.clamp(0.0, 100.0) as u32)
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn openai_and_native_task_objects_parse() {
        let openai = json!({
            "id": "vid_1", "object": "video", "status": "in_progress", "progress": 42,
            "size": "1280x720", "expires_at": null, "model": "sora-2", "seconds": "4"
        });
        let seen = Observation::parse(&openai);
        assert_eq!(seen.upstream_id.as_deref(), Some("vid_1"));
        assert_eq!(seen.status, Some(VideoStatus::InProgress));
        assert_eq!(seen.progress, Some(42));
        let extra: Value = serde_json::from_str(&seen.extra).expect("extra is JSON");
        assert_eq!(extra, json!({"size": "1280x720", "expires_at": null}), "owned fields are not passed through");

        let native = json!({"task_id": 77, "status": "FAILURE", "progress": "30%", "fail_reason": "nsfw"});
        let seen = Observation::parse(&native);
        assert_eq!(seen.upstream_id.as_deref(), Some("77"));
        assert_eq!(seen.status, Some(VideoStatus::Failed));
        assert_eq!(seen.progress, Some(30));
        assert_eq!(seen.error_message.as_deref(), Some("nsfw"));
        assert_eq!(seen.extra, r#"{"fail_reason":"nsfw"}"#);
        assert_eq!(Observation::parse(&json!("nope")), Observation::default());
    }

    #[test]
    fn observations_move_a_task_forward_only() {
        let mut task = VideoTask { progress: 50, status: VideoStatus::InProgress, ..VideoTask::default() };
        let back = Observation { status: Some(VideoStatus::Queued), progress: Some(10), ..Observation::default() };
        assert!(back.apply(&mut task, 5_000), "the look itself is recorded");
        assert_eq!((task.status, task.progress, task.checked_at_ms), (VideoStatus::InProgress, 50, 5_000));

        let done = Observation { status: Some(VideoStatus::Completed), ..Observation::default() };
        assert!(done.apply(&mut task, 9_000));
        assert_eq!((task.status, task.progress, task.completed_at), (VideoStatus::Completed, 100, 9));

        let failed = Observation { status: Some(VideoStatus::Failed), ..Observation::default() };
        assert!(!failed.apply(&mut task, 10_000), "a terminal task never changes");
        assert_eq!(task.status, VideoStatus::Completed);

        let mut task = VideoTask::default();
        assert!(failed.apply(&mut task, 10_000));
        assert_eq!((task.status, task.error_code.as_str()), (VideoStatus::Failed, "upstream_failed"));
        let capped = Observation { progress: Some(100), ..Observation::default() };
        let mut task = VideoTask::default();
        capped.apply(&mut task, 1);
        assert_eq!(task.progress, 99, "only a completed task is at 100");
    }

    #[test]
    fn ids_are_escaped_for_the_path() {
        assert_eq!(path_segment("vid_1-a.b~c"), "vid_1-a.b~c");
        assert_eq!(path_segment("a/../b?c"), "a%2F..%2Fb%3Fc");
    }
}
