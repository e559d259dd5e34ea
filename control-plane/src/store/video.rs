//! The store's part of video tasks and of leader election: task records
//! written only by compare-and-set, and named locks with a time to live.
//!
//! Video writes do not bump the policy revision: tasks are not part of the
//! snapshot data planes hold, so writing one wakes no watcher. A task whose
//! status is terminal (`completed`, `failed`) keeps it forever; the store
//! refuses any write that would change it.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::time::Duration;

use async_trait::async_trait;

use super::Result;
use crate::domain::{VideoStatus, VideoTask};

/// Listing filter; empty fields match everything.
#[derive(Debug, Clone, Default)]
pub struct VideoFilter {
    pub account_id: String,
    pub status: Option<VideoStatus>,
    /// 0 means 100.
    pub limit: usize,
    /// Only tasks listed after this `(created_at, id)`: the last of the
    /// previous page, since lists go newest first.
    pub before: Option<(i64, String)>,
}

/// What a compare-and-set did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VideoWrite {
    /// Stored; the task as it now is (its version bumped).
    Written(VideoTask),
    /// Not stored: the stored task (read it again and retry), or `None`
    /// when there is no such task.
    Conflict(Option<VideoTask>),
}

/// Video tasks and named locks. Every `Store` is one.
#[async_trait]
pub trait VideoStore: Send + Sync {
    /// Stores a new task as given (its `version` included); `false`, and
    /// nothing written, when the id is taken.
    async fn create_video(&self, task: &VideoTask) -> Result<bool>;

    /// One task, or `None`.
    async fn get_video(&self, id: &str) -> Result<Option<VideoTask>>;

    /// Compare-and-set: stores `task` with its version bumped by one when the
    /// stored task's version is `task.version` and `allowed(stored, task)`
    /// holds (a terminal status never changes); otherwise nothing changes and
    /// the answer carries the stored task.
    async fn update_video(&self, task: &VideoTask) -> Result<VideoWrite>;

    /// Tasks matching `filter`, newest first.
    async fn list_videos(&self, filter: &VideoFilter) -> Result<Vec<VideoTask>>;

    /// Up to `limit` open tasks (`VideoTask::is_open`), oldest first.
    async fn open_videos(&self, limit: usize) -> Result<Vec<VideoTask>>;

    /// Takes lock `name` for `holder`, or renews it when `holder` already
    /// has it, for `ttl`; `true` when `holder` holds it now. A holder that
    /// stops renewing loses it once `ttl` has passed.
    async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool>;

    /// Releases lock `name` if `holder` holds it.
    async fn unlock(&self, name: &str, holder: &str) -> Result<()>;
}

/// The store's rule for replacing `stored` with `next`: a terminal status
/// stays what it is. (Versions are compared by the caller.)
pub fn allowed(stored: &VideoTask, next: &VideoTask) -> bool {
    !stored.status.is_terminal() || stored.status == next.status
}

/// `filter`'s verdict on `task`.
pub fn matches(filter: &VideoFilter, task: &VideoTask) -> bool {
    (filter.account_id.is_empty() || filter.account_id == task.account_id)
        && filter.status.is_none_or(|status| status == task.status)
        && filter.before.as_ref().is_none_or(|(at, id)| (task.created_at, &task.id) < (*at, id))
}

/// The effective listing limit.
pub fn limit(filter: &VideoFilter) -> usize {
    if filter.limit == 0 { 100 } else { filter.limit }
}

/// Milliseconds of `ttl`, at least 1.
pub fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
