//! Video tasks: the control plane is their only authority. Data planes
//! create a task (priced and charged here, through the usage ledger, before
//! the upstream sees it), record what the upstream answered, and read the
//! task back for any client of the owning account.
//!
//! Invariants: every write is a compare-and-set on the task's version; a
//! terminal status never changes; the charge (`video:<id>`) and a failed
//! task's refund (`video-refund:<id>`) are usage records, so the ledger's
//! dedup applies each exactly once however often a step is retried or
//! replayed after a crash. A task is refreshed from the upstream when a query
//! finds it older than `Config::refresh_after`; the poller does the same for
//! tasks nobody asks about and fails those past `Config::timeout`.

pub mod poller;
mod upstream;

use std::{sync::Arc, time::Duration};

use crate::{
    domain::{Kind, Resource, VideoStatus, VideoTask, now_unix},
    services::ledger::{Ledger, LedgerError},
    store::{Charged, Store, StoreError, VideoFilter, VideoWrite},
};

pub use self::upstream::Observation;
pub use crate::services::outbound::Submission;

/// Longest video a task may ask for, in seconds.
pub const MAX_SECONDS: u32 = 600;
/// How long a task may wait for its upstream id (the data plane crashed or
/// lost the control plane mid-submission) before it fails and is refunded.
const SUBMIT_GRACE: Duration = Duration::from_secs(15 * 60);
/// Compare-and-set attempts before a write gives up.
const CAS_ATTEMPTS: usize = 32;

/// Timing of video tasks.
#[derive(Debug, Clone)]
pub struct Config {
    /// A task not finished this long after submission fails (and is refunded).
    pub timeout: Duration,
    /// How often the poller looks at open tasks.
    pub poll_interval: Duration,
    /// A status query older than this asks the upstream again.
    pub refresh_after: Duration,
}

/// The video task service of one control-plane replica.
pub struct Videos {
    store: Arc<dyn Store>,
    ledger: Arc<Ledger>,
    config: Config,
    upstream: upstream::Upstream,
}

/// What a data plane asks to create.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub node_id: String,
    pub request_id: String,
    pub token_id: String,
    pub model: String,
    pub channel_id: String,
    pub seconds: u32,
    pub size: String,
}

/// Why a video operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    #[error("video task {0:?} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the token's quota cannot pay for the video")]
    TokenQuota,
    #[error("the account's balance cannot pay for the video")]
    UserQuota { balance_micros: i64 },
    #[error("video task {0:?} is being written too often; try again")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

// === impl Config ===

impl Default for Config {
    fn default() -> Config {
        Config {
            timeout: Duration::from_secs(30 * 60),
            poll_interval: Duration::from_secs(5),
            refresh_after: Duration::from_secs(3),
        }
    }
}

// === impl Videos ===

impl Videos {
    /// The service over `store`. Fails only if the HTTP client cannot be built.
    pub fn new(store: Arc<dyn Store>, ledger: Arc<Ledger>, config: Config) -> anyhow::Result<Videos> {
        Ok(Videos { store, ledger, config, upstream: upstream::Upstream::new()? })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Prices and creates a task for `new`, then charges it. Refuses with
    /// `TokenQuota` or `UserQuota` when the token or the account cannot pay
    /// (nothing is created then).
    pub async fn create(&self, new: NewTask) -> Result<VideoTask, VideoError> {
        if new.seconds == 0 || new.seconds > MAX_SECONDS {
            return Err(VideoError::Invalid(format!("seconds must be between 1 and {MAX_SECONDS}")));
        }
        let Some(Resource::Token(token)) = self.store.get(Kind::Token, &new.token_id).await? else {
            return Err(VideoError::Invalid(format!("token {:?} not found", new.token_id)));
        };
        let Some(Resource::Account(account)) = self.store.get(Kind::Account, &token.account_id).await? else {
            return Err(VideoError::Invalid(format!("account {:?} not found", token.account_id)));
        };
        let Some(Resource::Group(group)) = self.store.get(Kind::Group, &token.group).await? else {
            return Err(VideoError::Invalid(format!("group {:?} not found", token.group)));
        };
        let Some(Resource::Model(model)) = self.store.get(Kind::Model, &new.model).await? else {
            return Err(VideoError::Invalid(format!("model {:?} not found", new.model)));
        };
        if model.category != "video" {
            return Err(VideoError::Invalid(format!("model {:?} is not a video model", new.model)));
        }
        if self.store.get(Kind::Channel, &new.channel_id).await?.is_none() {
            return Err(VideoError::Invalid(format!("channel {:?} not found", new.channel_id)));
        }
        let cost = gw_pricing::video_cost_micros(model.second_price_micros, new.seconds, group.ratio_ppm());
        let now = now_unix();
        let mut task = VideoTask {
            id: String::new(),
            account_id: account.id,
            token_id: token.id,
            group: group.name,
            model: model.id,
            channel_id: new.channel_id,
            seconds: new.seconds,
            size: new.size,
            cost_micros: cost,
            created_at: now,
            updated_at: now,
            // Nothing to ask the upstream yet.
            checked_at_ms: now_millis(),
            node_id: new.node_id,
            request_id: new.request_id,
            charged: true,
            ..VideoTask::default()
        };
        task.id = new_id();
        // Charged first, in one step with the check that the token and the
        // account can pay: concurrent tasks never overdraw them.
        match self.ledger.charge_video(&task).await? {
            Charged::Applied | Charged::Duplicate => {}
            Charged::TokenQuota => return Err(VideoError::TokenQuota),
            Charged::Balance { balance_micros } => return Err(VideoError::UserQuota { balance_micros }),
        }
        match self.store.create_video(&task).await {
            Ok(true) => {}
            outcome => {
                // Not created (an id taken, ids are random: practically never,
                // or the store failed): nothing to pay for.
                self.ledger.refund_video(&task).await?;
                outcome?;
                return Err(VideoError::Busy(task.id));
            }
        }
        tracing::info!(video = %task.id, account = %task.account_id, model = %task.model, seconds = task.seconds, cost, "video task created");
        crate::services::telemetry::video_status(task.status);
        Ok(task)
    }

    /// Records the upstream's answer to the submission of task `id`: its
    /// upstream id and first state, or the failure (the task fails and is
    /// refunded). A task that already has an upstream id or a terminal
    /// status is left as it is.
    pub async fn record_submission(&self, id: &str, submission: Submission) -> Result<VideoTask, VideoError> {
        let task = self.stored(id).await?;
        let now_ms = now_millis();
        let task = match submission {
            Submission::Accepted(answer) => {
                let observed = Observation::parse(&answer);
                let Some(upstream_id) = observed.upstream_id.clone().filter(|id| !id.is_empty()) else {
                    return Err(VideoError::Invalid("the upstream's answer has no task id".into()));
                };
                self.modify(task, |t| {
                    if !t.upstream_id.is_empty() || t.status.is_terminal() {
                        return false;
                    }
                    t.upstream_id.clone_from(&upstream_id);
                    observed.apply(t, now_ms);
                    true
                })
                .await?
            }
            Submission::Rejected { code, message } => {
                tracing::info!(video = %id, %code, "video submission failed");
                self.modify(task, |t| fail(t, &code, &message, now_ms)).await?
            }
        };
        self.settle(task).await
    }

    /// Task `id` of `account_id` (another account's task is `NotFound`),
    /// refreshed from the upstream first when its state is stale.
    pub async fn get(&self, id: &str, account_id: &str) -> Result<VideoTask, VideoError> {
        let task = self.stored(id).await?;
        if task.account_id != account_id {
            return Err(VideoError::NotFound(id.to_owned()));
        }
        self.tend(task).await
    }

    /// Task `id` as stored, for operators: no refresh.
    pub async fn peek(&self, id: &str) -> Result<VideoTask, VideoError> {
        self.stored(id).await
    }

    /// Tasks matching `filter`, newest first, as stored.
    pub async fn list(&self, filter: &VideoFilter) -> Result<Vec<VideoTask>, VideoError> {
        Ok(self.store.list_videos(filter).await?)
    }

    /// Brings an open task forward: asks the upstream when its state is
    /// stale, fails it when it ran out of time (or never got an upstream
    /// id), and settles its billing. A task the upstream cannot be asked
    /// about keeps its stored state.
    pub async fn tend(&self, task: VideoTask) -> Result<VideoTask, VideoError> {
        let mut task = task;
        if !task.status.is_terminal() {
            let now_ms = now_millis();
            let stale = now_ms.saturating_sub(task.checked_at_ms) >= millis(self.config.refresh_after);
            if stale && !task.upstream_id.is_empty() {
                task = self.refresh(task).await?;
            }
            let age = Duration::from_secs(u64::try_from(now_unix().saturating_sub(task.created_at)).unwrap_or(0));
            if !task.status.is_terminal() {
                if age >= self.config.timeout {
                    let message = format!("the video was not finished within {}s", self.config.timeout.as_secs());
                    task = self.modify(task, |t| fail(t, "timeout", &message, now_ms)).await?;
                } else if task.upstream_id.is_empty() && age >= SUBMIT_GRACE.min(self.config.timeout) {
                    let message = "the submission to the upstream never completed";
                    task = self.modify(task, |t| fail(t, "submission_lost", message, now_ms)).await?;
                }
            }
        }
        if task.is_open() && task.status.is_terminal() {
            task = self.settle(task).await?;
        }
        Ok(task)
    }

    /// Asks the upstream about `task` and stores what it said.
    async fn refresh(&self, task: VideoTask) -> Result<VideoTask, VideoError> {
        let now_ms = now_millis();
        let channel = match self.store.get(Kind::Channel, &task.channel_id).await? {
            Some(Resource::Channel(channel)) => channel,
            _ => {
                let message = "the channel that ran the task was removed";
                return self.modify(task, |t| fail(t, "channel_removed", message, now_ms)).await;
            }
        };
        match self.upstream.status(&channel, &task.upstream_id).await {
            Ok(observed) => self.modify(task, |t| !t.status.is_terminal() && observed.apply(t, now_ms)).await,
            Err(upstream::FetchError::NotFound) => {
                let message = "the upstream no longer knows the task";
                self.modify(task, |t| fail(t, "upstream_task_missing", message, now_ms)).await
            }
            Err(upstream::FetchError::Failed(reason)) => {
                tracing::warn!(video = %task.id, channel = %channel.id, %reason, "video status query failed");
                // Remembered so that the next query does not ask again at once.
                self.modify(task, |t| {
                    let later = !t.status.is_terminal() && t.checked_at_ms < now_ms;
                    if later {
                        t.checked_at_ms = now_ms;
                    }
                    later
                })
                .await
            }
        }
    }

    /// Charges an uncharged task and refunds a failed one, each once.
    async fn settle(&self, task: VideoTask) -> Result<VideoTask, VideoError> {
        let mut task = task;
        if !task.charged {
            // A task of an older control plane, created before its charge.
            self.ledger.record_video_charge(&task).await?;
            task = self.modify(task, |t| !std::mem::replace(&mut t.charged, true)).await?;
        }
        if task.status == VideoStatus::Failed && !task.refunded {
            self.ledger.refund_video(&task).await?;
            task = self.modify(task, |t| !std::mem::replace(&mut t.refunded, true)).await?;
            tracing::info!(video = %task.id, account = %task.account_id, cost = task.cost_micros, "failed video task refunded");
        }
        Ok(task)
    }

    async fn stored(&self, id: &str) -> Result<VideoTask, VideoError> {
        self.store.get_video(id).await?.ok_or_else(|| VideoError::NotFound(id.to_owned()))
    }

    /// Compare-and-set loop: applies `change` to the newest stored state
    /// until the write lands. `change` returns whether it changed anything;
    /// when it did not, the stored task is returned unwritten.
    async fn modify(
        &self,
        task: VideoTask,
        mut change: impl FnMut(&mut VideoTask) -> bool,
    ) -> Result<VideoTask, VideoError> {
        let mut current = task;
        for _ in 0..CAS_ATTEMPTS {
            let mut next = current.clone();
            if !change(&mut next) {
                return Ok(current);
            }
            match self.store.update_video(&next).await? {
                VideoWrite::Written(written) => {
                    if written.status != current.status {
                        crate::services::telemetry::video_status(written.status);
                    }
                    return Ok(written);
                }
                VideoWrite::Conflict(Some(stored)) => current = stored,
                VideoWrite::Conflict(None) => return Err(VideoError::NotFound(current.id)),
            }
        }
        Err(VideoError::Busy(current.id))
    }
}

/// Fails `task` with `code` and `message` unless it is already terminal;
/// whether it changed.
fn fail(task: &mut VideoTask, code: &str, message: &str, now_ms: i64) -> bool {
    if task.status.is_terminal() {
        return false;
    }
    task.status = VideoStatus::Failed;
    code.clone_into(&mut task.error_code);
    message.clone_into(&mut task.error_message);
    task.updated_at = now_ms / 1000;
    task.checked_at_ms = now_ms;
    true
}

/// A new public task id: `video_`, 12 hex digits of Unix milliseconds, 20
/// random ones, so ids sort by creation time.
fn new_id() -> String {
    let millis = u64::try_from(now_millis()).unwrap_or(0) & 0xffff_ffff_ffff;
    let random: u128 = rand::random::<u128>() & ((1u128 << 80) - 1);
    format!("video_{millis:012x}{random:020x}")
}

pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
