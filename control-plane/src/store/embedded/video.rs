//! Video tasks and locks in the embedded store: `videos`, id → JSON of the
//! task; `video_time`, `(created_at, id)` of every task, for listing newest
//! first; `video_open`, `(created_at, id)` of open tasks; `locks`, name → JSON
//! `(holder, expires_at_ms)`. Each write is one redb transaction, which makes
//! compare-and-set trivially atomic; none bumps the policy revision.

use std::time::Duration;

use async_trait::async_trait;
use redb::{ReadTransaction, ReadableTable, TableDefinition, TableError};

use super::{EmbeddedStore, db_err, decode, encode};
use crate::domain::VideoTask;
use crate::store::Result;
use crate::store::video::{self, VideoFilter, VideoStore, VideoWrite};

const VIDEOS: TableDefinition<&str, &[u8]> = TableDefinition::new("videos");
const BY_TIME: TableDefinition<(i64, &str), ()> = TableDefinition::new("video_time");
const OPEN: TableDefinition<(i64, &str), ()> = TableDefinition::new("video_open");
const LOCKS: TableDefinition<&str, &[u8]> = TableDefinition::new("locks");

#[async_trait]
impl VideoStore for EmbeddedStore {
    async fn create_video(&self, task: &VideoTask) -> Result<bool> {
        let task = task.clone();
        let (created, _) = self
            .write(move |txn| {
                let mut videos = txn.open_table(VIDEOS).map_err(db_err)?;
                if videos.get(task.id.as_str()).map_err(db_err)?.is_some() {
                    return Ok((false, vec![]));
                }
                videos.insert(task.id.as_str(), encode(&task)?.as_slice()).map_err(db_err)?;
                let mut by_time = txn.open_table(BY_TIME).map_err(db_err)?;
                by_time.insert((task.created_at, task.id.as_str()), ()).map_err(db_err)?;
                if task.is_open() {
                    let mut open = txn.open_table(OPEN).map_err(db_err)?;
                    open.insert((task.created_at, task.id.as_str()), ()).map_err(db_err)?;
                }
                Ok((true, vec![]))
            })
            .await?;
        Ok(created)
    }

    async fn get_video(&self, id: &str) -> Result<Option<VideoTask>> {
        let id = id.to_owned();
        self.read(move |txn| {
            let Some(videos) = open_read(txn, VIDEOS)? else { return Ok(None) };
            let json = videos.get(id.as_str()).map_err(db_err)?;
            json.map(|json| decode(json.value())).transpose()
        })
        .await
    }

    async fn update_video(&self, task: &VideoTask) -> Result<VideoWrite> {
        let task = task.clone();
        let (outcome, _) = self
            .write(move |txn| {
                let mut videos = txn.open_table(VIDEOS).map_err(db_err)?;
                let stored: Option<VideoTask> =
                    videos.get(task.id.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let Some(stored) = stored else { return Ok((VideoWrite::Conflict(None), vec![])) };
                if stored.version != task.version || !video::allowed(&stored, &task) {
                    return Ok((VideoWrite::Conflict(Some(stored)), vec![]));
                }
                let mut next = task;
                next.version += 1;
                videos.insert(next.id.as_str(), encode(&next)?.as_slice()).map_err(db_err)?;
                let mut open = txn.open_table(OPEN).map_err(db_err)?;
                if next.is_open() {
                    open.insert((next.created_at, next.id.as_str()), ()).map_err(db_err)?;
                } else {
                    open.remove((next.created_at, next.id.as_str())).map_err(db_err)?;
                }
                Ok((VideoWrite::Written(next), vec![]))
            })
            .await?;
        Ok(outcome)
    }

    async fn list_videos(&self, filter: &VideoFilter) -> Result<Vec<VideoTask>> {
        let filter = filter.clone();
        let limit = video::limit(&filter);
        self.read(move |txn| {
            let (Some(by_time), Some(videos)) = (open_read(txn, BY_TIME)?, open_read(txn, VIDEOS)?) else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            for entry in by_time.iter().map_err(db_err)?.rev() {
                let (key, _) = entry.map_err(db_err)?;
                let (_, id) = key.value();
                let Some(json) = videos.get(id).map_err(db_err)? else { continue };
                let task: VideoTask = decode(json.value())?;
                if video::matches(&filter, &task) {
                    out.push(task);
                    if out.len() == limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn open_videos(&self, limit: usize) -> Result<Vec<VideoTask>> {
        self.read(move |txn| {
            let (Some(open), Some(videos)) = (open_read(txn, OPEN)?, open_read(txn, VIDEOS)?) else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            for entry in open.iter().map_err(db_err)?.take(limit) {
                let (key, _) = entry.map_err(db_err)?;
                let (_, id) = key.value();
                if let Some(json) = videos.get(id).map_err(db_err)? {
                    out.push(decode(json.value())?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn try_lock(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let (held, _) = self
            .write(move |txn| {
                let mut locks = txn.open_table(LOCKS).map_err(db_err)?;
                let now = now_millis();
                let current: Option<(String, i64)> =
                    locks.get(name.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
                let free = match &current {
                    None => true,
                    Some((owner, expires)) => *owner == holder || *expires <= now,
                };
                if free {
                    let expires = now.saturating_add(i64::try_from(video::ttl_millis(ttl)).unwrap_or(i64::MAX));
                    locks.insert(name.as_str(), encode(&(holder, expires))?.as_slice()).map_err(db_err)?;
                }
                Ok((free, vec![]))
            })
            .await?;
        Ok(held)
    }

    async fn unlock(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.write(move |txn| {
            let mut locks = txn.open_table(LOCKS).map_err(db_err)?;
            let current: Option<(String, i64)> =
                locks.get(name.as_str()).map_err(db_err)?.map(|json| decode(json.value())).transpose()?;
            if current.is_some_and(|(owner, _)| owner == holder) {
                locks.remove(name.as_str()).map_err(db_err)?;
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(())
    }
}

/// A table for reading, or `None` when no write has created it yet.
pub(super) fn open_read<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<K, V>,
) -> Result<Option<redb::ReadOnlyTable<K, V>>> {
    match txn.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(error) => Err(db_err(error)),
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
