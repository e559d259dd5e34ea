//! The file and batch RPCs of `PolicyService` (data planes): request
//! validation, the domain call, the answer; and files and batches at the
//! protobuf boundary. The service impl delegates here.

use gw_proto::pb;
use tonic::Status;

use crate::domain::{Batch, BatchFile, BatchKind};
use crate::services::batch::{BatchError, Batches, NewBatch, NewFile, settle_object};
use crate::store::BatchFilter;

/// `PolicyService.RecordBatchFile`.
pub async fn record_file(batches: &Batches, r: pb::RecordBatchFileRequest) -> Result<pb::BatchFile, Status> {
    required(&[("token_id", &r.token_id), ("channel_id", &r.channel_id), ("upstream_id", &r.upstream_id)])?;
    let new = NewFile {
        token_id: r.token_id,
        channel_id: r.channel_id,
        upstream_id: r.upstream_id,
        purpose: r.purpose,
        filename: r.filename,
        bytes: r.bytes,
        model: r.model,
        endpoint: r.endpoint,
        lines: r.lines,
        prompt_tokens_bound: r.prompt_tokens_bound,
        completion_tokens_bound: r.completion_tokens_bound,
    };
    Ok(batches.record_file(new).await?.into())
}

/// `PolicyService.GetBatchFile`: only the owning account finds the file.
pub async fn get_file(batches: &Batches, r: pb::BatchRef) -> Result<pb::BatchFile, Status> {
    required(&[("account_id", &r.account_id)])?;
    Ok(batches.file(&r.id, &r.account_id).await?.into())
}

/// `PolicyService.ListBatchFiles`.
pub async fn list_files(batches: &Batches, r: pb::ListBatchItemsRequest) -> Result<pb::ListBatchFilesResponse, Status> {
    required(&[("account_id", &r.account_id)])?;
    let purpose = Some(r.purpose.clone()).filter(|purpose| !purpose.is_empty());
    let (items, has_more) = batches.list_files(&filter(r), purpose.as_deref()).await?;
    Ok(pb::ListBatchFilesResponse { items: items.into_iter().map(Into::into).collect(), has_more })
}

/// `PolicyService.DeleteBatchFile`.
pub async fn delete_file(batches: &Batches, r: pb::BatchRef) -> Result<pb::BatchFile, Status> {
    required(&[("account_id", &r.account_id)])?;
    Ok(batches.delete_file(&r.id, &r.account_id).await?.into())
}

/// `PolicyService.CreateBatch`: a refusal to pay is an answer, not an error.
pub async fn create(batches: &Batches, r: pb::CreateBatchRequest) -> Result<pb::CreateBatchResponse, Status> {
    required(&[("token_id", &r.token_id), ("model", &r.model), ("channel_id", &r.channel_id)])?;
    let kind = BatchKind::parse(&r.kind).ok_or_else(|| Status::invalid_argument("kind must be openai or anthropic"))?;
    if kind == BatchKind::Openai && r.input_file_id.is_empty() {
        return Err(Status::invalid_argument("input_file_id is required"));
    }
    let new = NewBatch {
        node_id: r.node_id,
        request_id: r.request_id,
        token_id: r.token_id,
        kind,
        model: r.model,
        channel_id: r.channel_id,
        input_file_id: r.input_file_id,
        endpoint: r.endpoint,
        completion_window: r.completion_window,
        lines: r.lines,
        prompt_tokens_bound: r.prompt_tokens_bound,
        completion_tokens_bound: r.completion_tokens_bound,
    };
    match batches.create(new).await {
        Ok(batch) => Ok(pb::CreateBatchResponse { batch: Some(batch.into()), ..Default::default() }),
        Err(BatchError::TokenQuota) => {
            Ok(pb::CreateBatchResponse { refused: "token_quota".into(), ..Default::default() })
        }
        Err(BatchError::UserQuota { balance_micros }) => {
            Ok(pb::CreateBatchResponse { refused: "user_quota".into(), balance_micros, ..Default::default() })
        }
        Err(error) => Err(error.into()),
    }
}

/// `PolicyService.RecordBatchUpstream`.
pub async fn record(batches: &Batches, r: pb::RecordBatchUpstreamRequest) -> Result<pb::Batch, Status> {
    let submission = super::convert::submission(r.failed, &r.upstream_json, r.error_code, r.error_message)?;
    Ok(batches.record_submission(&r.id, submission).await?.into())
}

/// `PolicyService.GetBatch`: only the owning account finds the batch.
pub async fn get(batches: &Batches, r: pb::BatchRef) -> Result<pb::Batch, Status> {
    required(&[("account_id", &r.account_id)])?;
    Ok(batches.get(&r.id, &r.account_id).await?.into())
}

/// `PolicyService.ListBatches`.
pub async fn list(batches: &Batches, r: pb::ListBatchItemsRequest) -> Result<pb::ListBatchesResponse, Status> {
    required(&[("account_id", &r.account_id)])?;
    let kind = kind(&r.kind)?;
    let (items, has_more) = batches.list(&filter(r), kind).await?;
    Ok(pb::ListBatchesResponse { items: items.into_iter().map(Into::into).collect(), has_more })
}

/// `PolicyService.CancelBatch`.
pub async fn cancel(batches: &Batches, r: pb::BatchRef) -> Result<pb::Batch, Status> {
    required(&[("account_id", &r.account_id)])?;
    Ok(batches.cancel(&r.id, &r.account_id).await?.into())
}

/// `AdminService.ListBatches`: as stored, every account's when none is named.
pub async fn admin_list(batches: &Batches, r: pb::ListBatchItemsRequest) -> Result<pb::ListBatchesResponse, Status> {
    let kind = kind(&r.kind)?;
    let (items, has_more) = batches.list(&filter(r), kind).await?;
    Ok(pb::ListBatchesResponse { items: items.into_iter().map(Into::into).collect(), has_more })
}

/// `AdminService.GetBatch`: the stored state, whoever owns it.
pub async fn admin_get(batches: &Batches, r: pb::GetRequest) -> Result<pb::Batch, Status> {
    Ok(batches.peek(&r.id).await?.into())
}

fn kind(name: &str) -> Result<Option<BatchKind>, Status> {
    match name {
        "" => Ok(None),
        name => {
            BatchKind::parse(name).map(Some).ok_or_else(|| Status::invalid_argument("kind must be openai or anthropic"))
        }
    }
}

fn required(fields: &[(&str, &String)]) -> Result<(), Status> {
    match fields.iter().find(|(_, value)| value.is_empty()) {
        Some((field, _)) => Err(Status::invalid_argument(format!("{field} is required"))),
        None => Ok(()),
    }
}

fn filter(r: pb::ListBatchItemsRequest) -> BatchFilter {
    BatchFilter { account_id: r.account_id, limit: r.limit as usize, after: r.after }
}

impl From<BatchFile> for pb::BatchFile {
    fn from(f: BatchFile) -> pb::BatchFile {
        pb::BatchFile {
            id: f.id,
            account_id: f.account_id,
            channel_id: f.channel_id,
            upstream_id: f.upstream_id,
            purpose: f.purpose,
            filename: f.filename,
            bytes: f.bytes,
            created_at: f.created_at,
            model: f.model,
            endpoint: f.endpoint,
            lines: f.lines,
            prompt_tokens_bound: f.prompt_tokens_bound,
            completion_tokens_bound: f.completion_tokens_bound,
        }
    }
}

impl From<Batch> for pb::Batch {
    fn from(b: Batch) -> pb::Batch {
        pb::Batch {
            object_json: settle_object(&b).to_string(),
            id: b.id,
            kind: b.kind.as_str().to_owned(),
            account_id: b.account_id,
            token_id: b.token_id,
            model: b.model,
            channel_id: b.channel_id,
            upstream_id: b.upstream_id,
            status: b.status,
            ended: b.ended,
            hold_micros: b.hold_micros,
            cost_micros: b.cost_micros,
            settled: b.settled,
            created_at: b.created_at,
            error_code: b.error_code,
            error_message: b.error_message,
        }
    }
}
