//! File and batch calls to the control plane, their authority: record an
//! uploaded file, create a batch (its bound held) and record what the
//! upstream answered, read, list, cancel, delete. A control plane that does
//! not answer is `ControlPlaneUnavailable` (503); one that does not know the
//! id, or knows it as another account's, is `BatchObjectNotFound` (404).

use std::time::Duration;

use gw_proto::pb;
use serde_json::Value;
use tonic::{Code, Status};

use super::{ControlPlane, submission};
use crate::{
    batches::{Batch, Bound, File, NewBatch, NewFile, Page},
    error::ProxyError,
    policy::auth::Caller,
};

/// Deadline of a write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Deadline of a read or a cancel, which may wait for the upstream.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The control-plane client of the file and batch handlers.
#[derive(Clone)]
pub struct Batches {
    control: ControlPlane,
    node_id: String,
}

type Client = pb::policy_service_client::PolicyServiceClient<tonic::transport::Channel>;

// === impl Batches ===

impl Batches {
    /// File and batch calls to `control`, made as node `node_id`.
    pub fn new(control: ControlPlane, node_id: &str) -> Batches {
        Batches { control, node_id: node_id.to_owned() }
    }

    fn client(&self) -> Client {
        pb::policy_service_client::PolicyServiceClient::new(self.control.channel())
    }

    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = self.control.request(message);
        request.set_timeout(timeout);
        request
    }

    fn reference(caller: &Caller, id: &str) -> pb::BatchRef {
        pb::BatchRef { id: id.to_owned(), account_id: caller.account.id.clone() }
    }

    /// Records a file uploaded for `caller`.
    pub async fn record_file(&self, caller: &Caller, new: NewFile<'_>) -> Result<File, ProxyError> {
        let message = pb::RecordBatchFileRequest {
            token_id: caller.token.id.to_string(),
            channel_id: new.channel_id.to_owned(),
            upstream_id: new.upstream_id.to_owned(),
            purpose: "batch".to_owned(),
            filename: new.filename.to_owned(),
            bytes: new.bytes,
            model: new.model.to_owned(),
            endpoint: new.endpoint.to_owned(),
            lines: new.bound.lines,
            prompt_tokens_bound: new.bound.prompt_tokens,
            completion_tokens_bound: new.bound.completion_tokens,
        };
        let file = self.client().record_batch_file(self.request(message, WRITE_TIMEOUT)).await;
        Ok(file.map_err(|status| refused(&status, "file", ""))?.into_inner().into())
    }

    /// File `id` of `caller`'s account.
    pub async fn file(&self, caller: &Caller, id: &str) -> Result<File, ProxyError> {
        let file = self.client().get_batch_file(self.request(Self::reference(caller, id), READ_TIMEOUT)).await;
        Ok(file.map_err(|status| refused(&status, "file", id))?.into_inner().into())
    }

    /// A page of `caller`'s files (of `purpose` only, when not empty),
    /// newest first.
    pub async fn files(
        &self,
        caller: &Caller,
        limit: u32,
        after: &str,
        purpose: &str,
    ) -> Result<Page<File>, ProxyError> {
        let message = pb::ListBatchItemsRequest {
            account_id: caller.account.id.clone(),
            limit,
            after: after.to_owned(),
            purpose: purpose.to_owned(),
            ..Default::default()
        };
        let page = self.client().list_batch_files(self.request(message, READ_TIMEOUT)).await;
        let page = page.map_err(|status| refused(&status, "file", after))?.into_inner();
        Ok(Page { items: page.items.into_iter().map(Into::into).collect(), has_more: page.has_more })
    }

    /// Deletes file `id` of `caller`'s account (upstream first).
    pub async fn delete_file(&self, caller: &Caller, id: &str) -> Result<File, ProxyError> {
        let file = self.client().delete_batch_file(self.request(Self::reference(caller, id), READ_TIMEOUT)).await;
        Ok(file.map_err(|status| refused(&status, "file", id))?.into_inner().into())
    }

    /// Creates a batch for `caller` and holds its bound; the control
    /// plane's refusal to let the caller pay is the matching 403.
    pub async fn create(&self, caller: &Caller, new: NewBatch<'_>) -> Result<Batch, ProxyError> {
        let Bound { lines, prompt_tokens, completion_tokens } = new.bound;
        let message = pb::CreateBatchRequest {
            node_id: self.node_id.clone(),
            request_id: new.request_id.to_owned(),
            token_id: caller.token.id.to_string(),
            kind: new.kind.to_owned(),
            model: new.model.to_owned(),
            channel_id: new.channel_id.to_owned(),
            input_file_id: new.input_file_id.to_owned(),
            endpoint: new.endpoint.to_owned(),
            completion_window: new.completion_window.to_owned(),
            lines,
            prompt_tokens_bound: prompt_tokens,
            completion_tokens_bound: completion_tokens,
        };
        let answer = self.client().create_batch(self.request(message, WRITE_TIMEOUT)).await;
        let answer = answer.map_err(|status| refused(&status, "file", new.input_file_id))?.into_inner();
        submission::charged(&answer.refused, answer.batch, answer.balance_micros, "batch").map(Batch::from)
    }

    /// Records that the upstream accepted batch `id` with `answer`.
    pub async fn accepted(&self, id: &str, answer: &Value) -> Result<Batch, ProxyError> {
        let message = pb::RecordBatchUpstreamRequest {
            id: id.to_owned(),
            upstream_json: answer.to_string(),
            ..Default::default()
        };
        self.record(message).await
    }

    /// Records that the submission of batch `id` failed; it ends and its
    /// hold is released.
    pub async fn rejected(&self, id: &str, error: &ProxyError) -> Result<Batch, ProxyError> {
        let message = pb::RecordBatchUpstreamRequest {
            id: id.to_owned(),
            failed: true,
            error_code: format!("submission_{}", error.reason()),
            error_message: error.message(),
            ..Default::default()
        };
        self.record(message).await
    }

    async fn record(&self, message: pb::RecordBatchUpstreamRequest) -> Result<Batch, ProxyError> {
        let send = || async {
            let mut client = self.client();
            client
                .record_batch_upstream(self.request(message.clone(), WRITE_TIMEOUT))
                .await
                .map(tonic::Response::into_inner)
        };
        let batch = submission::recorded("batch", &message.id, send).await;
        Ok(batch.map_err(|status| refused(&status, "batch", &message.id))?.into())
    }

    /// Batch `id` of `caller`'s account, as fresh as the control plane makes it.
    pub async fn get(&self, caller: &Caller, id: &str) -> Result<Batch, ProxyError> {
        let batch = self.client().get_batch(self.request(Self::reference(caller, id), READ_TIMEOUT)).await;
        Ok(batch.map_err(|status| refused(&status, "batch", id))?.into_inner().into())
    }

    /// A page of `caller`'s batches of `kind` (`openai`, `anthropic`),
    /// newest first.
    pub async fn list(&self, caller: &Caller, kind: &str, limit: u32, after: &str) -> Result<Page<Batch>, ProxyError> {
        let account_id = caller.account.id.clone();
        let message = pb::ListBatchItemsRequest {
            account_id,
            limit,
            after: after.to_owned(),
            kind: kind.to_owned(),
            ..Default::default()
        };
        let page = self.client().list_batches(self.request(message, READ_TIMEOUT)).await;
        let page = page.map_err(|status| refused(&status, "batch", after))?.into_inner();
        Ok(Page { items: page.items.into_iter().map(Into::into).collect(), has_more: page.has_more })
    }

    /// Asks for batch `id` of `caller`'s account to be cancelled.
    pub async fn cancel(&self, caller: &Caller, id: &str) -> Result<Batch, ProxyError> {
        let batch = self.client().cancel_batch(self.request(Self::reference(caller, id), READ_TIMEOUT)).await;
        Ok(batch.map_err(|status| refused(&status, "batch", id))?.into_inner().into())
    }
}

/// The client-facing error for a failed control-plane call about `what` `id`.
fn refused(status: &Status, what: &'static str, id: &str) -> ProxyError {
    match status.code() {
        Code::NotFound => ProxyError::BatchObjectNotFound { what, id: id.to_owned() },
        Code::InvalidArgument => ProxyError::InvalidField { field: "request", reason: status.message().to_owned() },
        Code::Unavailable if status.message().contains("upstream") => ProxyError::UpstreamStatus {
            status: axum::http::StatusCode::BAD_GATEWAY,
            message: status.message().to_owned(),
        },
        _ => {
            tracing::warn!(code = ?status.code(), message = status.message(), "batch call to the control plane failed");
            ProxyError::ControlPlaneUnavailable
        }
    }
}

// === impl File, Batch ===

impl From<pb::BatchFile> for File {
    fn from(f: pb::BatchFile) -> File {
        File {
            id: f.id,
            channel_id: f.channel_id,
            upstream_id: f.upstream_id,
            purpose: f.purpose,
            filename: f.filename,
            bytes: f.bytes,
            created_at: f.created_at,
            model: f.model,
            endpoint: f.endpoint,
        }
    }
}

impl From<pb::Batch> for Batch {
    fn from(b: pb::Batch) -> Batch {
        Batch {
            object: serde_json::from_str(&b.object_json).unwrap_or(Value::Null),
            id: b.id,
            model: b.model,
            channel_id: b.channel_id,
            upstream_id: b.upstream_id,
            status: b.status,
            ended: b.ended,
        }
    }
}
