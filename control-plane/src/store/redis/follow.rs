//! Follows the revision other replicas write: one task per store tails
//! `{gw}:changes` with a blocking `XREAD` on a connection of its own and
//! publishes the newest revision, re-reading `{gw}:rev` whenever the feed is
//! quiet, which also catches a server that lost its data.

use std::sync::Arc;
use std::time::Duration;

use redis::streams::StreamReadReply;
use redis::{AsyncCommands as _, RedisError};
use tokio::sync::watch;

use super::conn::{Conn, Dialer};
use super::layout::{CHANGES, REV};

/// How long the follower's `XREAD` blocks before it re-reads `{gw}:rev`.
const FOLLOW_BLOCK: Duration = Duration::from_secs(1);
/// The follower's pauses between reconnects.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Aborts the task when dropped.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

// === impl AbortOnDrop ===

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Publishes the newest revision of the Redis `dialer` reaches into
/// `revision`, until aborted: tails `{gw}:changes` with a blocking `XREAD` on
/// a connection of its own, and re-reads `{gw}:rev` whenever the feed is quiet, which also
/// catches a server that lost its data and went back to a lower revision.
pub(super) async fn follow(dialer: Dialer, revision: Arc<watch::Sender<u64>>, mut seen: u64) {
    let mut backoff = RECONNECT_MIN;
    loop {
        if let Err(error) = follow_connected(&dialer, &revision, &mut seen, &mut backoff).await {
            tracing::warn!(%error, retry_in = ?backoff, "following the redis change feed failed");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// One connection's worth of `follow`; returns only on an error.
async fn follow_connected(
    dialer: &Dialer,
    revision: &watch::Sender<u64>,
    seen: &mut u64,
    backoff: &mut Duration,
) -> Result<(), RedisError> {
    let mut conn = dialer.own(FOLLOW_BLOCK + Duration::from_secs(5)).await?;
    *backoff = RECONNECT_MIN;
    resync(&mut conn, revision, seen).await?;
    loop {
        let reply: Option<StreamReadReply> = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1_000)
            .arg("BLOCK")
            .arg(FOLLOW_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(CHANGES)
            .arg(format!("{seen}-{}", u64::MAX))
            .query_async(&mut conn)
            .await?;
        let newest =
            reply.iter().flat_map(|r| &r.keys).flat_map(|k| &k.ids).filter_map(|entry| entry_revision(&entry.id)).max();
        match newest {
            Some(newest) => {
                *seen = (*seen).max(newest);
                revision.send_if_modified(|current| raise(current, newest));
            }
            None => resync(&mut conn, revision, seen).await?,
        }
    }
}

/// Reads `{gw}:rev` and publishes it. A value below what subscribers were
/// told means the server lost data, and they are told the lower value.
async fn resync(conn: &mut Conn, revision: &watch::Sender<u64>, seen: &mut u64) -> Result<(), RedisError> {
    // Read before the GET: every revision published so far (by the follower
    // or by a write of this instance) was committed before the GET was sent,
    // so a lower answer is a lost one, not a race with a local write.
    let told = *revision.borrow();
    let now: u64 = conn.get::<_, Option<u64>>(REV).await?.unwrap_or(0);
    if now < told {
        tracing::warn!(revision = now, previous = told, "redis revision went back; was its data lost?");
        // Unless a local write published a newer revision meanwhile.
        revision.send_if_modified(|current| {
            let lower = *current == told;
            if lower {
                *current = now;
            }
            lower
        });
    } else {
        revision.send_if_modified(|current| raise(current, now));
    }
    *seen = now;
    Ok(())
}

/// Sets `current` to `revision` if that is newer; whether it was.
pub(super) fn raise(current: &mut u64, revision: u64) -> bool {
    let newer = revision > *current;
    if newer {
        *current = revision;
    }
    newer
}

/// The revision of a feed entry id `<rev>-<n>`.
pub(super) fn entry_revision(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}
