//! Files and batches: the control plane is their only authority, as it is
//! for video tasks. Data planes upload a file to the channel its model
//! routes to and record it here; create a batch (its bound held through
//! the ledger before the upstream sees it), record what the upstream
//! answered, and read files and batches back for the owning account only.
//!
//! Invariants: every batch write is a compare-and-set on its version; an
//! ended batch never runs again; the hold (`batch-hold:<id>`), the cost of
//! the lines that completed (`batch:<id>`) and the hold's release
//! (`batch-release:<id>`) are usage records, so the ledger applies each
//! exactly once however often a step is retried or replayed after a
//! restart. A batch is refreshed from the upstream when a query finds it
//! older than `Config::refresh_after`; the poller does the same for the
//! batches nobody asks about, and settles the ones that ended.

mod files;
pub mod poller;
mod settle;
mod upstream;

use std::{sync::Arc, time::Duration};

use crate::{
    domain::{Batch, BatchFile, BatchKind, Kind, Resource, now_unix},
    services::ledger::{Ledger, LedgerError},
    store::{BatchFilter, BatchWrite, Charged, Store, StoreError},
};

pub use self::files::NewFile;
pub use self::settle::client_object as settle_object;
pub use self::upstream::Observation;
pub use crate::services::outbound::Submission;

/// How long a batch may wait for its upstream id (the data plane crashed
/// or lost the control plane mid-submission) before it ends and its hold
/// is released.
const SUBMIT_GRACE: Duration = Duration::from_secs(15 * 60);
/// Compare-and-set attempts before a write gives up.
const CAS_ATTEMPTS: usize = 32;
/// Longest page of a listing.
pub const MAX_PAGE: usize = 100;

/// Timing of batches.
#[derive(Debug, Clone)]
pub struct Config {
    /// How often the poller looks at open batches.
    pub poll_interval: Duration,
    /// A status query older than this asks the upstream again.
    pub refresh_after: Duration,
}

/// The file and batch service of one control-plane replica.
pub struct Batches {
    store: Arc<dyn Store>,
    ledger: Arc<Ledger>,
    config: Config,
    upstream: upstream::Upstream,
}

/// What a data plane asks to create.
#[derive(Debug, Clone, Default)]
pub struct NewBatch {
    pub node_id: String,
    pub request_id: String,
    pub token_id: String,
    pub kind: BatchKind,
    pub model: String,
    pub channel_id: String,
    /// Our id of the input file (OpenAI); its bound is the batch's.
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    /// The bound of inline requests (Anthropic).
    pub lines: i64,
    pub prompt_tokens_bound: i64,
    pub completion_tokens_bound: i64,
}

/// Why a file or batch operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the token's quota cannot cover the batch's bound")]
    TokenQuota,
    #[error("the account's balance cannot cover the batch's bound")]
    UserQuota { balance_micros: i64 },
    #[error("{0:?} is being written too often; try again")]
    Busy(String),
    #[error("the upstream could not be reached: {0}")]
    Upstream(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

// === impl Config ===

impl Default for Config {
    fn default() -> Config {
        Config { poll_interval: Duration::from_secs(10), refresh_after: Duration::from_secs(3) }
    }
}

// === impl Batches ===

impl Batches {
    /// The service over `store`. Fails only if the HTTP client cannot be built.
    pub fn new(store: Arc<dyn Store>, ledger: Arc<Ledger>, config: Config) -> anyhow::Result<Batches> {
        Ok(Batches { store, ledger, config, upstream: upstream::Upstream::new()? })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Creates a batch for `new` and holds its bound at the model's batch
    /// price. Refuses with `TokenQuota` or `UserQuota` when the token or
    /// the account cannot cover it (nothing is created then).
    pub async fn create(&self, new: NewBatch) -> Result<Batch, BatchError> {
        let Some(Resource::Token(token)) = self.store.get(Kind::Token, &new.token_id).await? else {
            return Err(BatchError::Invalid(format!("token {:?} not found", new.token_id)));
        };
        let Some(Resource::Group(group)) = self.store.get(Kind::Group, &token.group).await? else {
            return Err(BatchError::Invalid(format!("group {:?} not found", token.group)));
        };
        let Some(Resource::Model(model)) = self.store.get(Kind::Model, &new.model).await? else {
            return Err(BatchError::Invalid(format!("model {:?} not found", new.model)));
        };
        if self.store.get(Kind::Channel, &new.channel_id).await?.is_none() {
            return Err(BatchError::Invalid(format!("channel {:?} not found", new.channel_id)));
        }
        let (mut lines, mut prompt, mut completion) = (new.lines, new.prompt_tokens_bound, new.completion_tokens_bound);
        if new.kind == BatchKind::Openai {
            let input = self.file(&new.input_file_id, &token.account_id).await?;
            if input.model != new.model || input.channel_id != new.channel_id || input.lines == 0 {
                return Err(BatchError::Invalid(format!(
                    "file {:?} is not a batch input for {:?}",
                    input.id, new.model
                )));
            }
            (lines, prompt, completion) = (input.lines, input.prompt_tokens_bound, input.completion_tokens_bound);
        }
        if lines <= 0 || prompt < 0 || completion < 0 {
            return Err(BatchError::Invalid("a batch needs at least one request".into()));
        }
        let prices = crate::services::ledger::prices(&model);
        let regular = gw_pricing::bound_micros(prompt, completion, &prices, group.ratio_ppm())
            .saturating_add(prices.request_price_micros.max(0).saturating_mul(lines - 1));
        let now = now_unix();
        let mut batch = Batch {
            id: new_id(new.kind),
            kind: new.kind,
            account_id: token.account_id.clone(),
            token_id: token.id.clone(),
            group: group.name.clone(),
            model: model.id.clone(),
            channel_id: new.channel_id,
            input_file_id: new.input_file_id,
            endpoint: new.endpoint,
            completion_window: new.completion_window,
            lines,
            status: initial_status(new.kind).to_owned(),
            hold_micros: gw_pricing::batch_cost_micros(regular, model.batch_price_ppm),
            created_at: now,
            updated_at: now,
            checked_at_ms: now_millis(),
            node_id: new.node_id,
            request_id: new.request_id,
            ..Batch::default()
        };
        batch.upstream = settle::client_object(&batch).to_string();
        // Held first, in one step with the check that the token and the
        // account can cover it: concurrent batches never overdraw them.
        match self.ledger.charge_priced(&settle::hold_record(&batch)).await? {
            Charged::Applied | Charged::Duplicate => {}
            Charged::TokenQuota => return Err(BatchError::TokenQuota),
            Charged::Balance { balance_micros } => return Err(BatchError::UserQuota { balance_micros }),
        }
        match self.store.create_batch(&batch).await {
            Ok(true) => {}
            outcome => {
                self.ledger.apply_priced(&[settle::release_record(&batch)]).await?;
                outcome?;
                return Err(BatchError::Busy(batch.id));
            }
        }
        tracing::info!(batch = %batch.id, account = %batch.account_id, model = %batch.model, lines, hold = batch.hold_micros, "batch created");
        Ok(batch)
    }

    /// Records the upstream's answer to the submission of batch `id`: its
    /// upstream id and first state, or the failure (the batch ends and its
    /// hold is released). A batch already submitted or ended stays as it is.
    pub async fn record_submission(&self, id: &str, submission: Submission) -> Result<Batch, BatchError> {
        let batch = self.stored(id).await?;
        let now_ms = now_millis();
        let batch = match submission {
            Submission::Accepted(answer) => {
                let observed = Observation::parse(batch.kind, &answer);
                let Some(upstream_id) = observed.upstream_id.clone() else {
                    return Err(BatchError::Invalid("the upstream's answer has no batch id".into()));
                };
                self.modify(batch, |b| {
                    if !b.upstream_id.is_empty() || b.ended {
                        return false;
                    }
                    b.upstream_id.clone_from(&upstream_id);
                    settle::apply(b, &observed, now_ms)
                })
                .await?
            }
            Submission::Rejected { code, message } => {
                tracing::info!(batch = %id, %code, "batch submission failed");
                self.modify(batch, |b| settle::end(b, "failed", &code, &message, now_ms)).await?
            }
        };
        self.settle(batch).await
    }

    /// Batch `id` of `account_id` (another account's is `NotFound`),
    /// refreshed from the upstream first when its state is stale.
    pub async fn get(&self, id: &str, account_id: &str) -> Result<Batch, BatchError> {
        let batch = self.stored(id).await?;
        if batch.account_id != account_id {
            return Err(BatchError::NotFound(id.to_owned()));
        }
        self.tend(batch).await
    }

    /// Batch `id` as stored, for operators: no refresh.
    pub async fn peek(&self, id: &str) -> Result<Batch, BatchError> {
        self.stored(id).await
    }

    /// A page of batches by `filter` (of `kind` only, when given), newest
    /// first, and whether more follow.
    pub async fn list(&self, filter: &BatchFilter, kind: Option<BatchKind>) -> Result<(Vec<Batch>, bool), BatchError> {
        let read = |page: BatchFilter| {
            let store = self.store.clone();
            async move { store.list_batches(&page).await }
        };
        filtered_page(filter, read, |b: &Batch| &b.id, |b| kind.is_none_or(|kind| b.kind == kind)).await
    }

    /// Asks the upstream to cancel batch `id` of `account_id` and records
    /// its answer. An ended batch is answered as it is.
    pub async fn cancel(&self, id: &str, account_id: &str) -> Result<Batch, BatchError> {
        let batch = self.get(id, account_id).await?;
        if batch.ended {
            return Ok(batch);
        }
        if batch.upstream_id.is_empty() {
            let now_ms = now_millis();
            let message = "the batch was cancelled before the upstream took it";
            let batch =
                self.modify(batch, |b| settle::end(b, settle::cancelled(b.kind), "cancelled", message, now_ms)).await?;
            return self.settle(batch).await;
        }
        let channel = self.channel(&batch).await?;
        let observed = match self.upstream.cancel(&channel, batch.kind, &batch.upstream_id).await {
            Ok(observed) => observed,
            Err(upstream::FetchError::NotFound) => return Err(BatchError::NotFound(id.to_owned())),
            Err(upstream::FetchError::Failed(reason)) => return Err(BatchError::Upstream(reason)),
        };
        let now_ms = now_millis();
        let batch = self.modify(batch, |b| settle::apply(b, &observed, now_ms)).await?;
        tracing::info!(batch = %batch.id, status = %batch.status, "batch cancellation asked");
        self.settle(batch).await
    }

    /// Brings an open batch forward: asks the upstream when its state is
    /// stale, ends it when its submission never completed, and settles it
    /// once it ended. A batch the upstream cannot be asked about keeps its
    /// stored state.
    pub async fn tend(&self, batch: Batch) -> Result<Batch, BatchError> {
        let mut batch = batch;
        if !batch.ended {
            let now_ms = now_millis();
            let stale = now_ms.saturating_sub(batch.checked_at_ms) >= millis(self.config.refresh_after);
            if stale && !batch.upstream_id.is_empty() {
                batch = self.refresh(batch).await?;
            }
            let age = Duration::from_secs(u64::try_from(now_unix().saturating_sub(batch.created_at)).unwrap_or(0));
            if !batch.ended && batch.upstream_id.is_empty() && age >= SUBMIT_GRACE {
                let message = "the submission to the upstream never completed";
                batch = self.modify(batch, |b| settle::end(b, "failed", "submission_lost", message, now_ms)).await?;
            }
        }
        self.settle(batch).await
    }

    /// Asks the upstream about `batch` and stores what it said.
    async fn refresh(&self, batch: Batch) -> Result<Batch, BatchError> {
        let now_ms = now_millis();
        let channel = match self.channel(&batch).await {
            Ok(channel) => channel,
            Err(BatchError::NotFound(_)) => {
                let message = "the channel that ran the batch was removed";
                return self.modify(batch, |b| settle::end(b, "failed", "channel_removed", message, now_ms)).await;
            }
            Err(error) => return Err(error),
        };
        match self.upstream.status(&channel, batch.kind, &batch.upstream_id).await {
            Ok(observed) => self.modify(batch, |b| settle::apply(b, &observed, now_ms)).await,
            Err(upstream::FetchError::NotFound) => {
                let message = "the upstream no longer knows the batch";
                self.modify(batch, |b| settle::end(b, "failed", "upstream_batch_missing", message, now_ms)).await
            }
            Err(upstream::FetchError::Failed(reason)) => {
                tracing::warn!(batch = %batch.id, channel = %channel.id, %reason, "batch status query failed");
                self.modify(batch, |b| {
                    let later = !b.ended && b.checked_at_ms < now_ms;
                    if later {
                        b.checked_at_ms = now_ms;
                    }
                    later
                })
                .await
            }
        }
    }

    async fn channel(&self, batch: &Batch) -> Result<crate::domain::Channel, BatchError> {
        match self.store.get(Kind::Channel, &batch.channel_id).await? {
            Some(Resource::Channel(channel)) => Ok(channel),
            _ => Err(BatchError::NotFound(format!("channel {:?}", batch.channel_id))),
        }
    }

    async fn stored(&self, id: &str) -> Result<Batch, BatchError> {
        self.store.get_batch(id).await?.ok_or_else(|| BatchError::NotFound(id.to_owned()))
    }

    /// Compare-and-set loop: applies `change` to the newest stored state
    /// until the write lands. `change` returns whether it changed anything;
    /// when it did not, the stored batch is returned unwritten.
    async fn modify(&self, batch: Batch, mut change: impl FnMut(&mut Batch) -> bool) -> Result<Batch, BatchError> {
        let mut current = batch;
        for _ in 0..CAS_ATTEMPTS {
            let mut next = current.clone();
            if !change(&mut next) {
                return Ok(current);
            }
            next.upstream = settle::client_object(&next).to_string();
            match self.store.update_batch(&next).await? {
                BatchWrite::Written(written) => return Ok(written),
                BatchWrite::Conflict(Some(stored)) => current = stored,
                BatchWrite::Conflict(None) => return Err(BatchError::NotFound(current.id)),
            }
        }
        Err(BatchError::Busy(current.id))
    }
}

fn initial_status(kind: BatchKind) -> &'static str {
    match kind {
        BatchKind::Openai => "validating",
        BatchKind::Anthropic => "in_progress",
    }
}

/// A listing's page size: 0 is 20, at most `MAX_PAGE`.
pub fn page_size(limit: usize) -> usize {
    if limit == 0 { 20 } else { limit.min(MAX_PAGE) }
}

/// A new public id: the kind's prefix, 12 hex digits of Unix milliseconds
/// and 20 random ones, so ids sort by creation time.
fn new_id(kind: BatchKind) -> String {
    let prefix = match kind {
        BatchKind::Openai => "batch_",
        BatchKind::Anthropic => "msgbatch_",
    };
    format!("{prefix}{}", time_ordered_hex())
}

/// 12 hex digits of Unix milliseconds and 20 random ones.
fn time_ordered_hex() -> String {
    let millis = u64::try_from(now_millis()).unwrap_or(0) & 0xffff_ffff_ffff;
    let random: u128 = rand::random::<u128>() & ((1u128 << 80) - 1);
    format!("{millis:012x}{random:020x}")
}

fn now_millis() -> i64 {
    crate::services::video::now_millis()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

// Files are listed by the same filter; kept here so `files` stays about files.
impl Batches {
    /// A page of files by `filter` (of `purpose` only, when named), newest
    /// first, and whether more follow.
    pub async fn list_files(
        &self,
        filter: &BatchFilter,
        purpose: Option<&str>,
    ) -> Result<(Vec<BatchFile>, bool), BatchError> {
        let read = |page: BatchFilter| {
            let store = self.store.clone();
            async move { store.list_batch_files(&page).await }
        };
        filtered_page(filter, read, |f: &BatchFile| &f.id, |f| purpose.is_none_or(|purpose| f.purpose == purpose)).await
    }
}

/// A page of `filter`'s size of the stored items `read` lists (newest
/// first, after `filter.after`) that `keep` keeps, reading on past the ones
/// it drops, and whether more follow.
async fn filtered_page<T, F>(
    filter: &BatchFilter,
    read: impl Fn(BatchFilter) -> F,
    id: impl Fn(&T) -> &String,
    keep: impl Fn(&T) -> bool,
) -> Result<(Vec<T>, bool), BatchError>
where
    F: Future<Output = Result<Vec<T>, StoreError>>,
{
    let limit = page_size(filter.limit);
    let mut items = Vec::new();
    let mut page = BatchFilter { limit: limit + 1, ..filter.clone() };
    loop {
        let read = read(page.clone()).await?;
        let exhausted = read.len() < page.limit;
        if let Some(last) = read.last() {
            page.after.clone_from(id(last));
        }
        items.extend(read.into_iter().filter(|item| keep(item)));
        if exhausted || items.len() > limit {
            break;
        }
    }
    let more = items.len() > limit;
    items.truncate(limit);
    Ok((items, more))
}
