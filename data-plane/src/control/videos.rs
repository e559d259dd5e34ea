//! Video task calls to the control plane, their authority: create (and
//! charge), record the upstream's answer, read. A control plane that does
//! not answer is `ControlPlaneUnavailable` (503); one that does not know the
//! task, or knows it as another account's, is `VideoNotFound` (404).

use std::time::Duration;

use gw_proto::pb;
use serde_json::{Map, Value};
use tonic::{Code, Status};

use super::{ControlPlane, submission};
use crate::{
    error::ProxyError,
    policy::auth::Caller,
    videos::{NewTask, Task},
};

/// Deadline of a create or record call.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline of a status query, which may wait for the upstream.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// The control-plane client of the video handlers.
#[derive(Clone)]
pub struct Videos {
    control: ControlPlane,
    node_id: String,
}

// === impl Videos ===

impl Videos {
    /// Video task calls to `control`, made as node `node_id`.
    pub fn new(control: ControlPlane, node_id: &str) -> Videos {
        Videos { control, node_id: node_id.to_owned() }
    }

    fn client(&self) -> pb::policy_service_client::PolicyServiceClient<tonic::transport::Channel> {
        pb::policy_service_client::PolicyServiceClient::new(self.control.channel())
    }

    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = self.control.request(message);
        request.set_timeout(timeout);
        request
    }

    /// Creates and charges a task for `caller`; the control plane's refusal
    /// to let the caller pay is the matching 403.
    pub async fn create(&self, caller: &Caller, new: NewTask<'_>) -> Result<Task, ProxyError> {
        let message = pb::CreateVideoTaskRequest {
            node_id: self.node_id.clone(),
            request_id: new.request_id.to_owned(),
            token_id: caller.token.id.to_string(),
            model: new.model.to_owned(),
            channel_id: new.channel_id.to_owned(),
            seconds: new.seconds,
            size: new.size.to_owned(),
        };
        let answer = self
            .client()
            .create_video_task(self.request(message, WRITE_TIMEOUT))
            .await
            .map_err(|status| refused(&status, None))?
            .into_inner();
        submission::charged(&answer.refused, answer.task, answer.balance_micros, "video task").map(Task::from)
    }

    /// Records that the upstream accepted task `id` with `answer`.
    pub async fn accepted(&self, id: &str, answer: &Value) -> Result<Task, ProxyError> {
        let message = pb::RecordVideoUpstreamRequest {
            id: id.to_owned(),
            upstream_json: answer.to_string(),
            ..Default::default()
        };
        self.record(message).await
    }

    /// Records that the submission of task `id` failed; the task fails and
    /// is refunded.
    pub async fn rejected(&self, id: &str, error: &ProxyError) -> Result<Task, ProxyError> {
        let message = pb::RecordVideoUpstreamRequest {
            id: id.to_owned(),
            failed: true,
            error_code: format!("submission_{}", error.reason()),
            error_message: error.message(),
            ..Default::default()
        };
        self.record(message).await
    }

    async fn record(&self, message: pb::RecordVideoUpstreamRequest) -> Result<Task, ProxyError> {
        let send = || async {
            let mut client = self.client();
            client
                .record_video_upstream(self.request(message.clone(), WRITE_TIMEOUT))
                .await
                .map(tonic::Response::into_inner)
        };
        let task = submission::recorded("video task", &message.id, send).await;
        Ok(task.map_err(|status| refused(&status, Some(&message.id)))?.into())
    }

    /// Task `id` of `caller`'s account, as fresh as the control plane makes it.
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<Task, ProxyError> {
        let message = pb::GetVideoTaskRequest { id: id.to_owned(), account_id: caller.account.id.clone() };
        let task = self
            .client()
            .get_video_task(self.request(message, READ_TIMEOUT))
            .await
            .map_err(|status| refused(&status, Some(id)))?;
        Ok(task.into_inner().into())
    }
}

/// The client-facing error for a failed control-plane call about task `id`.
fn refused(status: &Status, id: Option<&str>) -> ProxyError {
    match status.code() {
        Code::NotFound => ProxyError::VideoNotFound { id: id.unwrap_or_default().to_owned() },
        Code::InvalidArgument => ProxyError::InvalidField { field: "request", reason: status.message().to_owned() },
        _ => {
            tracing::warn!(code = ?status.code(), message = status.message(), "video call to the control plane failed");
            ProxyError::ControlPlaneUnavailable
        }
    }
}

// === impl Task ===

impl From<pb::VideoTask> for Task {
    fn from(t: pb::VideoTask) -> Task {
        let extra = match serde_json::from_str(&t.extra_json) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        Task {
            id: t.id,
            model: t.model,
            channel_id: t.channel_id,
            upstream_id: t.upstream_id,
            status: t.status,
            progress: t.progress,
            seconds: t.seconds,
            size: t.size,
            created_at: t.created_at,
            completed_at: t.completed_at,
            error_code: t.error_code,
            error_message: t.error_message,
            extra,
        }
    }
}
