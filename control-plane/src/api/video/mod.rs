//! The video RPCs of `PolicyService` (data planes) and `AdminService`
//! (operators): request validation, the domain call, the answer. The service
//! impls delegate here so that their files stay about their own resources.

mod convert;

use gw_proto::pb;
use tonic::Status;

use crate::services::video::{NewTask, VideoError, Videos};
use crate::{domain::VideoStatus, store::VideoFilter};

/// `PolicyService.CreateVideoTask`: a refusal to pay is an answer, not an error.
pub async fn create(videos: &Videos, r: pb::CreateVideoTaskRequest) -> Result<pb::CreateVideoTaskResponse, Status> {
    for (field, value) in [("token_id", &r.token_id), ("model", &r.model), ("channel_id", &r.channel_id)] {
        if value.is_empty() {
            return Err(Status::invalid_argument(format!("{field} is required")));
        }
    }
    let new = NewTask {
        node_id: r.node_id,
        request_id: r.request_id,
        token_id: r.token_id,
        model: r.model,
        channel_id: r.channel_id,
        seconds: r.seconds,
        size: r.size,
    };
    match videos.create(new).await {
        Ok(task) => Ok(pb::CreateVideoTaskResponse { task: Some(task.into()), ..Default::default() }),
        Err(VideoError::TokenQuota) => {
            Ok(pb::CreateVideoTaskResponse { refused: "token_quota".into(), ..Default::default() })
        }
        Err(VideoError::UserQuota { balance_micros }) => {
            Ok(pb::CreateVideoTaskResponse { refused: "user_quota".into(), balance_micros, ..Default::default() })
        }
        Err(error) => Err(error.into()),
    }
}

/// `PolicyService.RecordVideoUpstream`.
pub async fn record(videos: &Videos, r: pb::RecordVideoUpstreamRequest) -> Result<pb::VideoTask, Status> {
    let submission = super::convert::submission(r.failed, &r.upstream_json, r.error_code, r.error_message)?;
    Ok(videos.record_submission(&r.id, submission).await?.into())
}

/// `PolicyService.GetVideoTask`: only the owning account finds the task.
pub async fn get(videos: &Videos, r: pb::GetVideoTaskRequest) -> Result<pb::VideoTask, Status> {
    if r.account_id.is_empty() {
        return Err(Status::invalid_argument("account_id is required"));
    }
    Ok(videos.get(&r.id, &r.account_id).await?.into())
}

/// `AdminService.GetVideoTask`: the stored state, whoever owns it.
pub async fn admin_get(videos: &Videos, r: pb::GetRequest) -> Result<pb::VideoTask, Status> {
    Ok(videos.peek(&r.id).await?.into())
}

/// `AdminService.ListVideoTasks`.
pub async fn admin_list(videos: &Videos, r: pb::ListVideoTasksRequest) -> Result<pb::ListVideoTasksResponse, Status> {
    let status =
        match r.status.as_str() {
            "" => None,
            name => Some(VideoStatus::parse(name).ok_or_else(|| {
                Status::invalid_argument("status must be one of queued, in_progress, completed, failed")
            })?),
        };
    // The page token is `<created_at>:<id>` of the previous page's last task.
    let before = match r.page_token.split_once(':') {
        _ if r.page_token.is_empty() => None,
        Some((at, id)) => Some((at.parse().map_err(|_| bad_page_token())?, id.to_owned())),
        None => return Err(bad_page_token()),
    };
    let limit = if r.limit == 0 { 100 } else { r.limit as usize };
    // One more than asked says whether there is a next page.
    let filter = VideoFilter { account_id: r.account_id, status, limit: limit + 1, before };
    let mut items = videos.list(&filter).await?;
    let mut next_page_token = String::new();
    if items.len() > limit {
        items.truncate(limit);
        if let Some(last) = items.last() {
            next_page_token = format!("{}:{}", last.created_at, last.id);
        }
    }
    Ok(pb::ListVideoTasksResponse { items: items.into_iter().map(Into::into).collect(), next_page_token })
}

fn bad_page_token() -> Status {
    Status::invalid_argument("invalid page token; list again from the start")
}
