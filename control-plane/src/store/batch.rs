//! The store's part of files and batches: records by id, listed per account
//! newest first (ids sort by creation time), batches written only by
//! compare-and-set and indexed while open for the poller.
//!
//! Like video tasks these are not policy: no write bumps the revision. An
//! ended batch stays ended; the store refuses any write that would reopen it.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use async_trait::async_trait;

use super::Result;
use crate::domain::{Batch, BatchFile};

/// One page of an account's files or batches.
#[derive(Debug, Clone, Default)]
pub struct BatchFilter {
    /// Empty lists every account's.
    pub account_id: String,
    /// 0 means 20.
    pub limit: usize,
    /// Only ids older than this one (the last of the previous page).
    pub after: String,
}

/// What a compare-and-set of a batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchWrite {
    /// Stored; the batch as it now is (its version bumped).
    Written(Batch),
    /// Not stored: the stored batch (read it again and retry), or `None`
    /// when there is no such batch.
    Conflict(Option<Batch>),
}

/// Files and batches. Every `Store` is one.
#[async_trait]
pub trait BatchStore: Send + Sync {
    /// Stores a new file; `false`, and nothing written, when the id is taken.
    async fn create_batch_file(&self, file: &BatchFile) -> Result<bool>;

    /// One file, or `None`.
    async fn get_batch_file(&self, id: &str) -> Result<Option<BatchFile>>;

    /// Forgets a file; whether it was there.
    async fn delete_batch_file(&self, id: &str) -> Result<bool>;

    /// Files matching `filter`, newest first.
    async fn list_batch_files(&self, filter: &BatchFilter) -> Result<Vec<BatchFile>>;

    /// Stores a new batch as given; `false`, and nothing written, when the
    /// id is taken.
    async fn create_batch(&self, batch: &Batch) -> Result<bool>;

    /// One batch, or `None`.
    async fn get_batch(&self, id: &str) -> Result<Option<Batch>>;

    /// Compare-and-set: stores `batch` with its version bumped by one when
    /// the stored version is `batch.version` and `allowed(stored, batch)`
    /// holds; otherwise nothing changes and the answer carries the stored one.
    async fn update_batch(&self, batch: &Batch) -> Result<BatchWrite>;

    /// Batches matching `filter`, newest first.
    async fn list_batches(&self, filter: &BatchFilter) -> Result<Vec<Batch>>;

    /// Up to `limit` open batches (`Batch::is_open`), oldest first.
    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>>;
}

/// The store's rule for replacing `stored` with `next`: an ended batch
/// stays ended. (Versions are compared by the caller.)
pub fn allowed(stored: &Batch, next: &Batch) -> bool {
    !stored.ended || next.ended
}

/// The effective page size.
pub fn limit(filter: &BatchFilter) -> usize {
    if filter.limit == 0 { 20 } else { filter.limit }
}
