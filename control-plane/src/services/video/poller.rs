//! The background video poller: one replica at a time (the holder of the
//! store lock `video-poller`, renewed every round, lost by a replica that
//! stops renewing) walks the open tasks, refreshing the ones nobody asked
//! about, failing those past their deadline and settling their billing.
//! Tasks live in the store, so a restarted control plane simply goes on.
//! Two replicas sweeping at once (a sweep outlived the lock) is harmless:
//! every write is a compare-and-set and the ledger applies each charge once.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt as _;
use tokio::{sync::watch, task::JoinHandle};

use super::Videos;

/// Name of the store lock the sweeping replica holds.
pub const LOCK: &str = "video-poller";
/// Open tasks looked at per round.
const BATCH: usize = 1_000;
/// Tasks tended at once.
const CONCURRENCY: usize = 8;

/// Spawns the poller; it sweeps every `poll_interval` while it holds the
/// lock, and releases the lock when `shutdown` turns true.
pub fn spawn(videos: Arc<Videos>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
    let holder = format!("cp-{:016x}", rand::random::<u64>());
    tokio::spawn(async move {
        let interval = videos.config().poll_interval.max(Duration::from_millis(50));
        let ttl = (interval * 3).max(Duration::from_secs(1));
        let mut leading = false;
        loop {
            match videos.store.try_lock(LOCK, &holder, ttl).await {
                Ok(held) => {
                    if held != leading {
                        tracing::info!(%holder, held, "video poller lock changed hands");
                        leading = held;
                    }
                    if held {
                        sweep(&videos).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %crate::domain::error_chain(&error), "video poller cannot reach the store")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        if leading && let Err(error) = videos.store.unlock(LOCK, &holder).await {
            tracing::warn!(error = %crate::domain::error_chain(&error), "video poller could not release its lock");
        }
    })
}

/// One round over the open tasks, oldest first.
async fn sweep(videos: &Videos) {
    let open = match videos.store.open_videos(BATCH).await {
        Ok(open) => open,
        Err(error) => {
            tracing::warn!(error = %crate::domain::error_chain(&error), "video poller cannot list open tasks");
            return;
        }
    };
    futures_util::stream::iter(open)
        .for_each_concurrent(CONCURRENCY, |task| async move {
            let id = task.id.clone();
            if let Err(error) = videos.tend(task).await {
                tracing::warn!(video = %id, error = %crate::domain::error_chain(&error), "video poller could not tend a task");
            }
        })
        .await;
}
