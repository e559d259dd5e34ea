//! Video tasks at the protobuf boundary.

use gw_proto::pb;

use crate::domain::VideoTask;

impl From<VideoTask> for pb::VideoTask {
    fn from(t: VideoTask) -> pb::VideoTask {
        pb::VideoTask {
            status: t.status.as_str().to_owned(),
            id: t.id,
            account_id: t.account_id,
            token_id: t.token_id,
            group: t.group,
            model: t.model,
            channel_id: t.channel_id,
            upstream_id: t.upstream_id,
            progress: t.progress,
            seconds: t.seconds,
            size: t.size,
            cost_micros: t.cost_micros,
            created_at: t.created_at,
            updated_at: t.updated_at,
            completed_at: t.completed_at,
            error_code: t.error_code,
            error_message: t.error_message,
            refunded: t.refunded,
            extra_json: t.extra,
        }
    }
}
