//! Files of accounts: the ones data planes uploaded for batches, and the
//! results and errors files batches made, kept as files of the batch's
//! account on the batch's channel.

use super::{BatchError, Batches, time_ordered_hex, upstream};
use crate::domain::{Batch, BatchFile, Kind, Resource, now_unix};

/// What a data plane uploaded and asks to keep.
#[derive(Debug, Clone, Default)]
pub struct NewFile {
    pub token_id: String,
    pub channel_id: String,
    pub upstream_id: String,
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    pub model: String,
    pub endpoint: String,
    pub lines: i64,
    pub prompt_tokens_bound: i64,
    pub completion_tokens_bound: i64,
}

/// Purpose of the files batches make.
pub const OUTPUT_PURPOSE: &str = "batch_output";

// === impl Batches ===

impl Batches {
    /// Keeps a file the data plane uploaded, as a file of the token's account.
    pub async fn record_file(&self, new: NewFile) -> Result<BatchFile, BatchError> {
        if new.upstream_id.is_empty() {
            return Err(BatchError::Invalid("upstream_id is required".into()));
        }
        let Some(Resource::Token(token)) = self.store.get(Kind::Token, &new.token_id).await? else {
            return Err(BatchError::Invalid(format!("token {:?} not found", new.token_id)));
        };
        if self.store.get(Kind::Channel, &new.channel_id).await?.is_none() {
            return Err(BatchError::Invalid(format!("channel {:?} not found", new.channel_id)));
        }
        let file = BatchFile {
            id: format!("file-{}", time_ordered_hex()),
            account_id: token.account_id,
            token_id: token.id,
            channel_id: new.channel_id,
            upstream_id: new.upstream_id,
            purpose: new.purpose,
            filename: new.filename,
            bytes: new.bytes.max(0),
            created_at: now_unix(),
            model: new.model,
            endpoint: new.endpoint,
            lines: new.lines.max(0),
            prompt_tokens_bound: new.prompt_tokens_bound.max(0),
            completion_tokens_bound: new.completion_tokens_bound.max(0),
            version: 0,
        };
        if !self.store.create_batch_file(&file).await? {
            return Err(BatchError::Busy(file.id));
        }
        tracing::info!(file = %file.id, account = %file.account_id, channel = %file.channel_id, lines = file.lines, "file recorded");
        Ok(file)
    }

    /// File `id` of `account_id`; another account's is `NotFound`.
    pub async fn file(&self, id: &str, account_id: &str) -> Result<BatchFile, BatchError> {
        match self.store.get_batch_file(id).await? {
            Some(file) if file.account_id == account_id => Ok(file),
            _ => Err(BatchError::NotFound(id.to_owned())),
        }
    }

    /// File `id` as stored, for operators.
    pub async fn peek_file(&self, id: &str) -> Result<BatchFile, BatchError> {
        self.store.get_batch_file(id).await?.ok_or_else(|| BatchError::NotFound(id.to_owned()))
    }

    /// Deletes file `id` of `account_id` from its channel, then forgets it;
    /// the file as it was.
    pub async fn delete_file(&self, id: &str, account_id: &str) -> Result<BatchFile, BatchError> {
        let file = self.file(id, account_id).await?;
        if let Some(Resource::Channel(channel)) = self.store.get(Kind::Channel, &file.channel_id).await? {
            match self.upstream.delete_file(&channel, &file.upstream_id).await {
                Ok(()) | Err(upstream::FetchError::NotFound) => {}
                Err(upstream::FetchError::Failed(reason)) => return Err(BatchError::Upstream(reason)),
            }
        }
        self.store.delete_batch_file(id).await?;
        tracing::info!(file = %id, account = %account_id, "file deleted");
        Ok(file)
    }

    /// Keeps the upstream's results file `upstream_id` of `batch` as a
    /// file of its account, under an id made from the batch's (so that
    /// doing it twice keeps one file); our id.
    pub(super) async fn keep_output(&self, batch: &Batch, upstream_id: &str, role: &str) -> Result<String, BatchError> {
        let suffix = batch.id.split_once('_').map_or(batch.id.as_str(), |(_, rest)| rest);
        let file = BatchFile {
            id: format!("file-{suffix}-{role}"),
            account_id: batch.account_id.clone(),
            token_id: batch.token_id.clone(),
            channel_id: batch.channel_id.clone(),
            upstream_id: upstream_id.to_owned(),
            purpose: OUTPUT_PURPOSE.to_owned(),
            filename: format!("{}_{role}.jsonl", batch.id),
            created_at: now_unix(),
            model: batch.model.clone(),
            endpoint: batch.endpoint.clone(),
            ..BatchFile::default()
        };
        self.store.create_batch_file(&file).await?;
        Ok(file.id)
    }
}
